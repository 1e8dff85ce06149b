"""`papa-glue`: PAPA steps 2 and 3 for sequence (GLUE) tasks: rank heads, probe with k constant.

The original run_papa_glue.py (papa_scripts/ shows its commands; flags: papa.runs.arguments).
"""

from . import probing_main


def main(argv=None):
    return probing_main("sequence", argv)


if __name__ == "__main__":
    main()
