#!/bin/bash
# SmolLM2 SST-2, the scripts by hand: as the sweep's stages but the last-token classifier (no --use_freeze_extract_pooler)
set -u
# from the repository root, with the project installed (README step 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
M=smollm2
O=outputs/smollm2_sst2_lt
D=../shared/data/glue/SST-2
t=$(date +%s)
[ -f $O/avgs/avgs.pt ] || python -m papa.cli.glue_avgs --model_name_or_path $M --task_name sst2 --data_dir $D --max_length 64 --per_device_train_batch_size 8 --output_dir $O/avgs --use_papa_preprocess true --pad_to_max_length --seed 42 --max_train_samples 256 > $O/avgs.log 2>&1
echo "avgs $(( $(date +%s)-t ))s" >> $O/times.txt
COMMON="--model_name_or_path $M --task_name sst2 --data_dir $D --max_seq_length 64 --per_device_train_batch_size 16 --per_device_eval_batch_size 32 --overwrite_output_dir --num_train_epochs 1 --learning_rate 3e-3 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --use_papa_preprocess --static_heads_dir $O/avgs --save_total_limit 0 --seed 42 --max_train_samples 256 --max_eval_samples 256"
t=$(date +%s)
[ -f $O/sort/sorted_heads.json ] || python -m papa.cli.glue $COMMON --do_train --output_dir $O/sort --sort_calculating True > $O/sort.log 2>&1
echo "sort $(( $(date +%s)-t ))s" >> $O/times.txt
for k in 0 135 270; do
  t=$(date +%s)
  [ -f $O/k_$k/eval_results.json ] || python -m papa.cli.glue $COMMON --do_train --do_eval --grad_for_classifier_only true --static_heads_num $k --sorting_heads_dir $O/sort --output_dir $O/k_$k > $O/k_$k.log 2>&1
  echo "k_$k $(( $(date +%s)-t ))s" >> $O/times.txt
done
