"""`papa-glue-avgs`: PAPA step 1 for sequence (GLUE) tasks: average every head's attention.

The original run_papa_glue_avgs_creator.py (papa_scripts/ shows its command; flags: papa.runs.arguments).
"""

from . import averaging_main


def main(argv=None):
    return averaging_main("sequence", argv)


if __name__ == "__main__":
    main()
