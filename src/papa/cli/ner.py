"""`papa-ner`: PAPA steps 2 and 3 for token (NER, POS, chunk) tasks: rank heads, probe with k constant.

The original run_papa_ner.py (flags: papa.runs.arguments).
"""

from . import probing_main


def main(argv=None):
    return probing_main("token", argv)


if __name__ == "__main__":
    main()
