#!/usr/bin/env python
"""PAPA step 1 for GLUE (sequence-classification) tasks: average every head's attention over the training set.

Writes avgs.pt [layers, heads, T, T] (the constant matrices), attention_sums.pt and
attention_patterns_sums.pt to --output_dir. Runs under torchrun / accelerate launch with any
number of processes; the result equals a single-process run.

    python run_papa_glue_avgs_creator.py --task_name cola --data_dir DIR --max_length 64 \
        --per_device_train_batch_size 8 --output_dir avgs --use_papa_preprocess true --pad_to_max_length
"""

from papa.cli.glue_avgs import main

if __name__ == "__main__":
    main()
