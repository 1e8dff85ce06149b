#!/bin/bash
# SST-2 continued without a ranking run: k = 0 and 270 need none; the random half uses the sweep's seed-42 random order
set -u
# from the repository root, with the project installed (README step 1)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=1
M=smollm2
O=outputs/smollm2_sst2_lt
D=../shared/data/glue/SST-2
while pgrep -f "glue_avgs.*smollm2_sst2_lt" > /dev/null; do sleep 5; done
echo "avgs done $(date -u +%T)" >> $O/times.txt
COMMON="--model_name_or_path $M --task_name sst2 --data_dir $D --max_seq_length 64 --per_device_train_batch_size 16 --per_device_eval_batch_size 32 --overwrite_output_dir --num_train_epochs 1 --learning_rate 3e-3 --lr_scheduler_type constant --evaluation_strategy no --save_strategy no --use_papa_preprocess --static_heads_dir $O/avgs --save_total_limit 0 --seed 42 --max_train_samples 256 --max_eval_samples 256 --do_train --do_eval --grad_for_classifier_only true --sorting_heads_dir $O/random_order"
for k in 0 270 135; do
  d=k_$k; [ $k = 135 ] && d=random_k_135
  t=$(date +%s)
  [ -f $O/$d/eval_results.json ] || python -m papa.cli.glue $COMMON --static_heads_num $k --output_dir $O/$d > $O/$d.log 2>&1
  echo "$d $(( $(date +%s)-t ))s" >> $O/times.txt
done
