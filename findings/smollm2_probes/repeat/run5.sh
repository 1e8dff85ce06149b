#!/bin/bash
# repeat: k = 253 (PAPA, then the random order), one thread, beside run.sh
set -u
# from the repository root, with the project installed (README step 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
M=smollm2
O=outputs/smollm2_repeat_lt
A=outputs/smollm2_repeat/avgs
COMMON="--model_name_or_path $M --task_name repeat --max_seq_length 32 --per_device_train_batch_size 16 --per_device_eval_batch_size 64 --overwrite_output_dir --num_train_epochs 1 --learning_rate 3e-3 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --use_papa_preprocess --static_heads_dir $A --save_total_limit 0 --seed 42 --max_train_samples 512 --max_eval_samples 500 --do_train --do_eval --grad_for_classifier_only true --static_heads_num 253"
t=$(date +%s)
[ -f $O/k_253/eval_results.json ] || python -m papa.cli.glue $COMMON --sorting_heads_dir $O/sort --output_dir $O/k_253 > $O/k_253.log 2>&1
echo "k_253 $(( $(date +%s)-t ))s" >> $O/times.txt
t=$(date +%s)
[ -f $O/random_k_253/eval_results.json ] || python -m papa.cli.glue $COMMON --sorting_heads_dir $O/random_order --output_dir $O/random_k_253 > $O/random_k_253.log 2>&1
echo "random_k_253 $(( $(date +%s)-t ))s" >> $O/times.txt
