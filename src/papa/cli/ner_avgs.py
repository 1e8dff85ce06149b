"""`papa-ner-avgs`: PAPA step 1 for token (NER, POS, chunk) tasks: average every head's attention.

The original run_papa_ner_avgs_creator.py (flags: papa.runs.arguments).
"""

from . import averaging_main


def main(argv=None):
    return averaging_main("token", argv)


if __name__ == "__main__":
    main()
