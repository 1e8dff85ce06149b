#!/usr/bin/env python
"""The whole PAPA method in one command: averages → head ranking → probing with k constant heads, for each k.

Runs the four PAPA scripts of this folder as subprocesses (the GLUE or the NER pair, by task), one
stage at a time, into --output_dir:

    avgs/  sort/  k_<k>/ ...  results.csv  results.md  results.png  lambdas.png  constant_matrices.png

Re-running resumes: a stage is skipped when its stamp (stage.json) matches its current command
line and input files, and redone otherwise (a changed avgs.pt redoes everything after it; a deleted
k_<k>/ redoes that k only).

    python papa_scripts/run_papa_sweep.py                         # bundled MiniLM, synthetic repeat task
    python papa_scripts/run_papa_sweep.py --task_name cola --data_dir ../shared/data/glue/CoLA \\
        --model_name_or_path bert-base-uncased                    # the original README's setting

Flags the sweep does not know are passed to every training run (ranking and probing), after the
sweep's own, so they override its defaults (e.g. --weight_decay 0.01 or --per_device_eval_batch_size 32).
"""

import argparse
import os
import shlex
import sys

from papa.errors import PapaError, run_cli


def build_parser():
    from papa.sweep import REPEAT_DEFAULTS as quick, README_DEFAULTS as readme

    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False,
        epilog=f"'Task default': the original README's settings for GLUE/CoNLL tasks (T={readme['max_seq_length']}, "
               f"{readme['num_train_epochs']:g} epochs, lr {readme['learning_rate']:g} constant, batch "
               f"{readme['per_device_train_batch_size']}); quick measured settings for the built-in repeat task "
               f"(T={quick['max_seq_length']}, {quick['num_train_epochs']:g} epochs, ranking run "
               f"{quick['sort_num_train_epochs']:g} epoch, lr {quick['learning_rate']:g} constant, batch "
               f"{quick['per_device_train_batch_size']}).")
    add = p.add_argument
    add("--model_name_or_path", default=None,
        help="BERT or RoBERTa model (hub name or folder). Default: the bundled all-MiniLM-L6-v2 (6 x 12 heads).")
    add("--task_name", default="repeat",
        help="GLUE task (cola sst2 mrpc qqp stsb mnli qnli rte wnli), token task (ner pos chunk), "
             "or the built-in synthetic 'repeat' (default; needs no data).")
    add("--data_dir", default=None,
        help="Folder with the task's files (GLUE train.tsv/dev.tsv, CoNLL train.txt/valid.txt).")
    add("--train_file", default=None, help="Training file, passed to every stage.")
    add("--validation_file", default=None, help="Validation file, passed to the training runs.")
    add("--output_dir", default=None, help="Where the stages and results go. Default: outputs/papa_sweep_<task>.")
    add("--static_heads_nums", type=int, nargs="+", default=None, metavar="K",
        help="Numbers of constant heads to probe. Default: 0, 1/2, 7/8, 15/16 and all of the model's heads "
             "(0 36 63 68 72 for MiniLM, 0 72 126 135 144 for BERT-base).")
    add("--num_train_epochs", type=float, default=None, help="Epochs of each probing run (task default).")
    add("--sort_num_train_epochs", type=float, default=None,
        help=f"Epochs of the ranking run (default: {quick['sort_num_train_epochs']:g} for repeat, "
             "--num_train_epochs for other tasks).")
    add("--learning_rate", type=float, default=None,
        help="Learning rate (constant schedule) of the training runs (task default).")
    add("--per_device_train_batch_size", type=int, default=None, help="Training batch size (task default).")
    add("--max_seq_length", type=int, default=None,
        help="Sequence length T of avgs.pt and of every run (task default).")
    add("--max_train_samples", type=int, default=None,
        help="Use only the first N training examples (for the averages too).")
    add("--max_eval_samples", type=int, default=None, help="Evaluate on the first N validation examples only.")
    add("--seed", type=int, default=42, help="Random seed of every stage (default 42).")
    add("--cache_dir", default=None, help="Hub cache folder, passed to every stage.")
    add("--extra_args", default="",
        help="More flags for the training runs, as one string: --extra_args=\"--weight_decay 0.01\" (with '='). "
             "Flags the sweep does not know are passed the same way, after its own, so they override its defaults.")
    return p


def main(argv=None):
    from papa.sweep import run_sweep

    args, unknown = build_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    if unknown and not unknown[0].startswith("-"):
        raise PapaError(f"unexpected argument {unknown[0]!r} (flags the sweep does not know must start with --)")
    run_sweep(
        model_name_or_path=args.model_name_or_path, task_name=args.task_name, data_dir=args.data_dir,
        train_file=args.train_file, validation_file=args.validation_file, output_dir=args.output_dir,
        static_heads_nums=args.static_heads_nums, num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate, per_device_train_batch_size=args.per_device_train_batch_size,
        max_seq_length=args.max_seq_length, max_train_samples=args.max_train_samples,
        max_eval_samples=args.max_eval_samples, seed=args.seed, sort_num_train_epochs=args.sort_num_train_epochs,
        extra_args=shlex.split(args.extra_args) + unknown, cache_dir=args.cache_dir,
        scripts_dir=os.path.dirname(os.path.abspath(__file__)),
    )


if __name__ == "__main__":
    run_cli(main)
