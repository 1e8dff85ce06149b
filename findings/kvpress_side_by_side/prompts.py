"""The prompts both sides read, written once: the project's generators (papa.data.retrieval, the validation split the
project's evaluations use, so example i is the same key at the same depth as in the other findings), split into the
context (prefilled, and what a press compresses), the question and the answer, as SmolLM2's token ids. Tasks: the
pass key, passkey_multi (four doors' keys, one asked) and RULER's multikey (four keys' magic numbers, one asked), the
ones whose question can be cut off the context (the others ask about the whole context: their question is the
context's end as much as its own).

    python findings/kvpress_side_by_side/prompts.py --lengths 2048 8192 --keys 20 10 --out OUT/prompts.jsonl
"""

import argparse
import json

TASKS = ("passkey", "passkey_multi", "multikey")


def questions(task, example):
    """The texts the example's question may be (passkey_multi does not record which door it asks)."""
    from papa.data.retrieval import DOOR_QUESTION, DOORS, QUESTION
    from papa.data.ruler import MULTIKEY_QUESTION

    if task == "passkey":
        return [QUESTION]
    if task == "passkey_multi":
        return [DOOR_QUESTION.format(door=door) for door in DOORS]
    return [MULTIKEY_QUESTION.format(key=example.key)]


def split_prompt(tokenizer, task, example):
    """(context, question, answer) token lists: the answer is the labelled suffix, the question the tokens before it
    that encode the task's question (with the answer's lone space token, which the prompt ends with)."""
    from papa.data.needles import IGNORE, encode

    ids, labels = example.input_ids, example.labels
    asked = next(i for i, label in enumerate(labels) if label != IGNORE)
    assert all(label != IGNORE for label in labels[asked:]), "the labelled tokens are not the prompt's suffix"
    for text in questions(task, example):
        question = encode(tokenizer, text)
        for moved in (0, 1):  # split_answer may have moved the answer's leading space token to the question
            start = asked - moved - len(question)
            if ids[start:asked - moved] == question:
                return ids[:start], ids[start:asked], ids[asked:]
    raise AssertionError(f"no {task} question found before the answer of example {example.key!r}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048], help="Prompt lengths T (tokens).")
    parser.add_argument("--keys", type=int, nargs="+", default=[20], help="Examples per length (one value each).")
    parser.add_argument("--task", choices=TASKS, default="passkey", help="The retrieval task (default passkey).")
    parser.add_argument("--out", required=True, help="The JSON-lines file to write.")
    args = parser.parse_args(argv)
    if len(args.keys) != len(args.lengths):
        parser.error("give one --keys value per --lengths value")

    from transformers import AutoTokenizer

    from papa.data.retrieval import make_examples
    from papa.io import save_text
    from papa.models.bundled import local_model_path

    tokenizer = AutoTokenizer.from_pretrained(local_model_path("smollm2"))
    rows = []
    for length, count in zip(args.lengths, args.keys):
        for index, example in enumerate(make_examples(args.task, tokenizer, length, count, "validation")):
            context, question, answer = split_prompt(tokenizer, args.task, example)
            rows.append({"task": args.task, "length": length, "index": index, "depth": example.depth,
                         "key": example.key, "context": context, "question": question, "answer": answer})
    save_text("".join(json.dumps(row) + "\n" for row in rows), args.out)
    print(f"{len(rows)} prompts -> {args.out}")


if __name__ == "__main__":
    main()
