#!/usr/bin/env python
"""PAPA steps 2 and 3 for GLUE (sequence-classification) tasks: rank heads, then probe with k constant heads.

Ranking run (mixes every head with a trained weight; writes lambdas.npy and sorted_heads.json):
    python run_papa_glue.py --task_name cola --data_dir DIR --do_train --do_eval --max_seq_length 64 \
        --output_dir sort --use_papa_preprocess --use_freeze_extract_pooler true \
        --static_heads_dir avgs --sort_calculating True --save_total_limit 0
Probing run with the k first-ranked heads constant:
    python run_papa_glue.py ... --grad_for_classifier_only true --use_freeze_extract_pooler true \
        --static_heads_dir avgs --sorting_heads_dir sort --static_heads_num k --output_dir results_k

Every HF TrainingArguments flag works; --evaluation_strategy is accepted as the old name of
--eval_strategy. Writes eval_results.json, train_results.json, all_results.json and
trainer_state.json; with --save_total_limit 0 only the config besides them, otherwise a model
that papa.load_papa_model(output_dir) restores.
"""

from papa.cli.glue import main

if __name__ == "__main__":
    main()
