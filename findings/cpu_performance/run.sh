#!/usr/bin/env bash
# Reruns this finding's benchmarks from the repository root into a scratch folder (default
# outputs/findings/cpu_performance):
#   bash findings/cpu_performance/run.sh [--quick] [OUT]
# These results are machine timings: nothing here rebuilds the committed numbers, which came from five 2-vCPU VMs and
# several commits. Full mode reruns, on the current code and this machine, the commands that made each section's
# results (the commands as their tables in benchmarks/results/ and in git at the commits the README names give them),
# each into OUT/<name>.json and .md beside it; expect other numbers, and run it on an idle machine (nothing else
# running) as those runs were. Not replayed: the before/after comparisons of code changes (the 0/1 mask, the V copies,
# the joint Q/K GEMM: each needs the commit before the change) and the other VMs' rows. About 5 hours on 2 cores, from
# the runs' own start times (the ranked ½ at T = 64 pooled over 1 100 rounds about an hour, each eager or mixed-layer
# run 25-60 minutes, the busy machine 30 minutes, each compiled run 20-30 minutes with a minute of compiling per
# graph). --quick: every benchmark but the compiled ones (a minute of compiling per graph) at batch 2, T = 32, one
# round and one process (the ranked heads in the eager run), the averaging pass on one batch, the probing step two
# runs pooled, busy_machine.py's stock step part (--skip_main_job: the main job's three runs take 4-20 minutes each;
# one round): 240 s on 2 cores shared with other jobs (load 3), most of it the 20-odd fresh processes' start (each
# benchmark's memory figures come from child processes) and busy_machine.py's fixed batch of 32 x 64 (85 s); the same
# programs and kinds of tables.
set -euo pipefail
source findings/replay_args.sh "$@"  # quick, out, data; the offline settings
mkdir -p "$out"
ranking=benchmarks/minilm_sst2_sorted_heads.json
bench() {  # name, then the benchmark's flags: skipped when OUT/<name>.json exists
  local name=$1; shift
  [ -f "$out/$name.json" ] || python papa_scripts/benchmark_papa.py "$@" --json "$out/$name.json"
}
pool() {  # name, then the runs' names: their paired rounds pooled, measuring nothing
  local name=$1; shift
  local runs=("${@/#/$out/}")
  [ -f "$out/$name.json" ] || python papa_scripts/benchmark_papa.py --pool "${runs[@]/%/.json}" --json "$out/$name.json"
}

if [ "$quick" = 1 ]; then
  small=(--batch_size 2 --seq_lens 32)
  # where the speed comes from, the averaging pass and the ranking step: every variant, averaging, training
  bench minilm_cpu_eager --sorted_heads "$ranking" --repeats 1 --avg_repeats 1 --avg_batches 1 --avg_seq_len 32 \
      --train_repeats 1 --train_seq_len 32 --train_variants 'probing (all constant)' sorting \
      'stock probe, backward through the encoder' "${small[@]}"
  # partly constant layers (every other head), every third row padded (the ranked heads: in the run above)
  bench minilm_cpu_mixed_layers_every_third --variants '1/2 constant' '1/2 constant, every other head' --repeats 1 \
      --padded_rows 'every third' --skip averaging training "${small[@]}"
  # the probing step: two runs, pooled
  for run in a b; do
    bench "minilm_cpu_probing_step_$run" --skip inference averaging --train_repeats 1 --train_seq_len 32 \
        --train_variants 'probing (1/2 constant)' 'probing (all constant)' --batch_size 2
  done
  pool minilm_cpu_probing_step minilm_cpu_probing_step_a minilm_cpu_probing_step_b
  # decoders: the random Llama shape, SmolLM2's ranking step
  bench llama_shaped_cpu_under_load --model_type llama --threads 1 --batch_size 1 --seq_lens 32 --repeats 1 \
      --variants '0 constant' '1/2 constant' 'all constant' --skip averaging training
  bench smollm2_training_cpu --model_name_or_path smollm2 --batch_size 1 --skip inference averaging \
      --train_seq_len 32 --train_repeats 1 --train_variants sorting 'stock probe, backward through the encoder'
  # a busy machine: the stock training step's part (the main job's three runs take 4-20 minutes each)
  [ -f "$out/busy_machine_cpu.md" ] || python benchmarks/busy_machine.py --busy 1 --rounds 1 --steps 3 \
      --skip_main_job --out "$out/busy_machine_cpu.md"
  echo "reran into $out"
  exit 0
fi

# Where the speed comes from, averaging pass and ranking step: the quiet-spell full run (7481dae), and its re-run
# after round 3's precision changes with the training modes timed 20 times (f2556d6, results/minilm_cpu_eager.md)
bench minilm_cpu --sorted_heads "$ranking" --repeats 10 --processes 3 --avg_repeats 5
bench minilm_cpu_eager --sorted_heads "$ranking" --repeats 10 --processes 3 --avg_repeats 5 --train_repeats 20

# Partly constant layers: every other head against ½ layer by layer, 6 processes, all rows padded and every third
# (results/minilm_cpu_mixed_layers.md, minilm_cpu_mixed_layers_every_third.md)
bench minilm_cpu_mixed_layers --variants '1/2 constant' '1/2 constant, every other head' --processes 6 --repeats 15 \
    --skip averaging training
bench minilm_cpu_mixed_layers_every_third --variants '1/2 constant' '1/2 constant, every other head' --processes 6 \
    --repeats 15 --padded_rows 'every third' --skip averaging training

# Ranked heads: ½ ranked at T = 64, three runs pooled over 1 100 rounds (b36d193, minilm_cpu_ranked_t64)
bench minilm_cpu_t64_ranked_10proc --sorted_heads "$ranking" --variants '1/2 constant' '1/2 constant, ranked' \
    --seq_lens 64 --repeats 20 --processes 10 --skip averaging training
for run in a b; do
  bench "minilm_cpu_t64_ranked_30proc_$run" --sorted_heads "$ranking" --variants '1/2 constant, ranked' --seq_lens 64 \
      --repeats 15 --processes 30 --skip averaging training
done
pool minilm_cpu_ranked_t64 minilm_cpu_t64_ranked_10proc minilm_cpu_t64_ranked_30proc_a minilm_cpu_t64_ranked_30proc_b

# Compiled against eager: VM1's three runs, pooled (b3524ba), and VM4's (results/minilm_cpu_compiled.md)
bench minilm_cpu_compiled_a --compile --variants '0 constant' '1/2 constant' '1/2 constant, every other head' \
    'all constant' --skip averaging training --repeats 20
bench minilm_cpu_compiled_b --compile --variants '0 constant' '1/2 constant' '1/2 constant, every other head' \
    'all constant' --skip averaging training --repeats 30
bench minilm_cpu_compiled_t64 --compile --seq_lens 64 --variants '1/2 constant' '1/2 constant, every other head' \
    'all constant' --skip averaging training --repeats 40
pool minilm_cpu_compiled_pooled minilm_cpu_compiled_a minilm_cpu_compiled_b minilm_cpu_compiled_t64
bench minilm_cpu_compiled --compile --variants '1/2 constant' '1/2 constant, every other head' \
    --skip averaging training --repeats 30

# The probing step: the dropout path beside the probabilities path (6bbb933), and six runs pooled
# (results/minilm_cpu_probing_step.md)
bench minilm_cpu_training --skip inference averaging --train_repeats 30 --train_variants 'probing (1/2 constant)' \
    'probing (all constant)' 'probing (all constant, probabilities path)'
runs=()
for run in a b c d e f; do
  bench "minilm_cpu_probing_step_$run" --skip inference averaging --train_repeats 60 \
      --train_variants 'probing (1/2 constant)' 'probing (all constant)'
  runs+=("minilm_cpu_probing_step_$run")
done
pool minilm_cpu_probing_step "${runs[@]}"

# A busy machine: the main job quiet, beside one spinning process with threads fitted and with torch's 2 threads
[ -f "$out/busy_machine_cpu.md" ] || python benchmarks/busy_machine.py --busy 1 --rounds 3 --steps 10 \
    --out "$out/busy_machine_cpu.md"

# Decoders: the random Llama-shaped decoder (run under load: load average 4.6-5.3), SmolLM2's ranking step
bench llama_shaped_cpu_under_load --model_type llama --threads 1 --batch_size 1 --seq_lens 128 512 --repeats 5 \
    --variants '0 constant' '1/2 constant' 'all constant' --skip averaging training
bench smollm2_training_cpu --model_name_or_path smollm2 --batch_size 1 --skip inference averaging \
    --train_seq_len 128 --train_repeats 10 --train_variants sorting 'stock probe, backward through the encoder'
echo "reran into $out"
