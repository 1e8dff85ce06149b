#!/usr/bin/env python
"""The whole PAPA method in one command: averages → head ranking → probing with k constant heads, for each k.

Runs the four PAPA scripts of this folder (as `python -m papa.cli.<command>` subprocesses: the GLUE or
the NER pair, by task), one stage at a time, into --output_dir:

    avgs/  sort/  k_<k>/ ...  results.csv  results.md  results.png  lambdas.png  constant_matrices.png

Re-running resumes: a stage is skipped when its stamp (stage.json) matches its current command
line and input files, and redone otherwise (a changed avgs.pt redoes everything after it; a deleted
k_<k>/ redoes that k only). The console shows one line per stage (a progress bar on a terminal) and
the results; each stage's full output goes to <stage>/log.txt (--verbose shows it too).

    python papa_scripts/run_papa_sweep.py                         # bundled MiniLM, synthetic repeat task
    python papa_scripts/run_papa_sweep.py --task_name cola --data_dir ../shared/data/glue/CoLA \\
        --model_name_or_path bert-base-uncased                    # the original README's setting

Flags the sweep does not know are passed to every training run (ranking and probing), after the
sweep's own, so they override its defaults (e.g. --weight_decay 0.01 or --per_device_eval_batch_size 32).
"""

from papa.cli.sweep import main

if __name__ == "__main__":
    main()
