"""The pass-key prompts both sides read, written once: the project's generator (papa.data.retrieval, the validation
split the project's evaluations use, so example i is the same key at the same depth as in the other findings), split
into the context (prefilled, and what a press compresses), the question and the answer, as SmolLM2's token ids.

    python findings/kvpress_side_by_side/prompts.py --lengths 2048 8192 --keys 20 10 --out OUT/prompts.jsonl
"""

import argparse
import json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048], help="Prompt lengths T (tokens).")
    parser.add_argument("--keys", type=int, nargs="+", default=[20], help="Examples per length (one value each).")
    parser.add_argument("--out", required=True, help="The JSON-lines file to write.")
    args = parser.parse_args(argv)
    if len(args.keys) != len(args.lengths):
        parser.error("give one --keys value per --lengths value")

    from transformers import AutoTokenizer

    from papa.data.needles import encode, split_answer
    from papa.data.retrieval import ANSWER, QUESTION, make_examples
    from papa.io import save_text
    from papa.models.bundled import local_model_path

    tokenizer = AutoTokenizer.from_pretrained(local_model_path("smollm2"))
    rows = []
    for length, count in zip(args.lengths, args.keys):
        for index, example in enumerate(make_examples("passkey", tokenizer, length, count, "validation")):
            question, answer = split_answer(tokenizer, encode(tokenizer, QUESTION),
                                            encode(tokenizer, ANSWER.format(key=example.key)))
            ids = example.input_ids
            asked = len(ids) - len(answer) - len(question)
            assert ids[asked:] == question + answer, "the prompt does not end with its question and answer"
            rows.append({"length": length, "index": index, "depth": example.depth, "key": example.key,
                         "context": ids[:asked], "question": question, "answer": answer})
    save_text("".join(json.dumps(row) + "\n" for row in rows), args.out)
    print(f"{len(rows)} prompts -> {args.out}")


if __name__ == "__main__":
    main()
