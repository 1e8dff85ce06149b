#!/bin/bash
# SST-2: the ranking run (λ, 1 epoch) and PAPA's half
set -u
# from the repository root, with the project installed (README step 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
M=smollm2
O=outputs/smollm2_sst2_lt
D=../shared/data/glue/SST-2
while pgrep -f "smollm2_sst2_lt/run2.sh" > /dev/null; do sleep 5; done
COMMON="--model_name_or_path $M --task_name sst2 --data_dir $D --max_seq_length 64 --per_device_train_batch_size 16 --per_device_eval_batch_size 32 --overwrite_output_dir --num_train_epochs 1 --learning_rate 3e-3 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --use_papa_preprocess --static_heads_dir $O/avgs --save_total_limit 0 --seed 42 --max_train_samples 256 --max_eval_samples 256"
t=$(date +%s)
[ -f $O/sort/sorted_heads.json ] || python -m papa.cli.glue $COMMON --do_train --output_dir $O/sort --sort_calculating True > $O/sort.log 2>&1
echo "sort $(( $(date +%s)-t ))s" >> $O/times.txt
t=$(date +%s)
[ -f $O/k_135/eval_results.json ] || python -m papa.cli.glue $COMMON --do_train --do_eval --grad_for_classifier_only true --static_heads_num 135 --sorting_heads_dir $O/sort --output_dir $O/k_135 > $O/k_135.log 2>&1
echo "k_135 $(( $(date +%s)-t ))s" >> $O/times.txt
