#!/usr/bin/env python
"""PAPA steps 2 and 3 for token-classification (NER, POS, chunk) tasks: rank heads, then probe with k constant heads.

The commands of run_papa_glue.py, with this script and a token task on CoNLL-2003 files, e.g. the ranking run:
    python run_papa_ner.py --task_name ner --data_dir CONLL_DIR --do_train --do_eval --max_seq_length 64 \
        --output_dir sort --use_papa_preprocess --use_freeze_extract_pooler true \
        --static_heads_dir avgs --sort_calculating True --save_total_limit 0
Token tasks also take --label_all_tokens and --return_entity_level_metrics; the outputs are run_papa_glue.py's.
"""

from papa.cli.ner import main

if __name__ == "__main__":
    main()
