#!/bin/bash
# findings/long_context_structured/README.md: every averaging pass and evaluation,
# one at a time, each under /usr/bin/time -v (peak RSS); a step whose output exists is skipped.
# SORT: the taylor ranking folder (findings/smollm2_rankers_lm_qnli's first sweep, sort_taylor/); O: where the runs go.
# Run from the repository root with the project's environment active.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
M=${M:-smollm2}
D=${D:-../shared/data}
SORT=${SORT:?set SORT to the taylor ranking folder}
O=${O:-outputs/lc51}
mkdir -p $O
log() { echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) $*" >> $O/progress.log; }
avg() { # name T blocks batch constants-args...
  local name=$1 T=$2 n=$3 b=$4; shift 4
  [ -f $O/$name/done ] && return
  log "start avg $name"
  /usr/bin/time -v -o $O/$name.time python -m papa.cli.glue_avgs --model_name_or_path $M --task_name lm_qnli \
    --data_dir $D --max_length $T --per_device_train_batch_size $b --output_dir $O/$name --seed 42 \
    --max_train_samples $n "$@" > $O/$name.log 2>&1 && touch $O/$name/done
  log "end avg $name rc=$? $(grep Maximum $O/$name.time)"
}
ev() { # name T blocks batch k constants-dir constants
  local name=$1 T=$2 n=$3 b=$4 k=$5 dir=$6 c=$7
  [ -f $O/$name/eval_results.json ] && return
  log "start eval $name"
  /usr/bin/time -v -o $O/$name.time python -m papa.cli.glue --model_name_or_path $M --task_name lm_qnli \
    --data_dir $D --do_eval --max_seq_length $T --per_device_eval_batch_size $b --max_eval_samples $n \
    --static_heads_num $k --static_heads_dir $dir --sorting_heads_dir $SORT --constants $c \
    --save_strategy no --save_total_limit 0 --report_to none --seed 42 --output_dir $O/$name > $O/$name.log 2>&1
  log "end eval $name rc=$? $(grep Maximum $O/$name.time)"
}
avg toep_t128 128 128 16 --constants toeplitz
avg toep_t1024 1024 16 2 --constants toeplitz
avg sw 128 1 1 --constants sink_window --sink_tokens 4 --window 64
avg full_t1024 1024 16 2
for k in 135 270; do
  ev t1024_toep128_k$k 1024 8 2 $k $O/toep_t128 toeplitz
  ev t1024_toep1024_k$k 1024 8 2 $k $O/toep_t1024 toeplitz
  ev t1024_full1024_k$k 1024 8 2 $k $O/full_t1024 full
  ev t1024_sw_k$k 1024 8 2 $k $O/sw sink_window
done
ev t1024_k0 1024 8 2 0 $O/toep_t128 toeplitz
avg toep_t8192 8192 1 1 --constants toeplitz  # 6.31 GB peak since 3de3191 (findings/long_context_structured/README.md)
ev t8192_toep8192_k135 8192 1 1 135 $O/toep_t8192 toeplitz
ev t8192_toep128_k135 8192 1 1 135 $O/toep_t128 toeplitz
avg toep_t2048 2048 8 1 --constants toeplitz
avg full_t2048 2048 8 1
for k in 135 270; do
  ev t2048_full2048_k$k 2048 4 1 $k $O/full_t2048 full
  ev t2048_toep128_k$k 2048 4 1 $k $O/toep_t128 toeplitz
  ev t2048_toep2048_k$k 2048 4 1 $k $O/toep_t2048 toeplitz
  ev t2048_sw_k$k 2048 4 1 $k $O/sw sink_window
done
ev t2048_k0 2048 4 1 0 $O/toep_t128 toeplitz
ev t8192_k0 8192 1 1 0 $O/toep_t128 toeplitz
log "all done"
