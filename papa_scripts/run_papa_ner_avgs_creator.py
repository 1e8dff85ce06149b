#!/usr/bin/env python
"""PAPA step 1 for token-classification (NER, POS, chunk) tasks: average every head's attention over the training set.

Writes what run_papa_glue_avgs_creator.py writes (avgs.pt and the two sums), from CoNLL-2003 files:

    python run_papa_ner_avgs_creator.py --task_name ner --data_dir CONLL_DIR --max_length 64 \
        --per_device_train_batch_size 8 --output_dir avgs --use_papa_preprocess true --pad_to_max_length
"""

from papa.cli.ner_avgs import main

if __name__ == "__main__":
    main()
