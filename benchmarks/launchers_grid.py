"""Wall time of one small grid under each launcher, run one after another on the same machine (issue: scale out).

    python benchmarks/launchers_grid.py [--data_dir ../shared/data] [--out outputs/launchers_grid]

Runs the bundled MiniLM on CoLA, SST-2 and CoNLL-2003 NER at a tiny budget three times, each into a fresh folder:
`--launcher inline`, `--launcher local --max_parallel 2 --cpus_per_stage 1`, and `--launcher slurm` (needs a running
cluster: .ci/slurm_up.sh). Reports each run's wall time, and the critical path of the inline run's stages (per pair:
averages → ranking → its longest probing run; the grid's is the longest pair's), which bounds what any number of
parallel stages could reach with the inline run's per-stage times. Writes benchmarks/results/launchers_grid.md (with
every run's seconds).
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GRID = ["--task_name", "cola", "sst2", "ner", "--max_train_samples", "200", "--max_eval_samples", "100",
        "--num_train_epochs", "1", "--sort_num_train_epochs", "1", "--learning_rate", "1e-3",
        "--static_heads_nums", "0", "36", "72", "--max_seq_length", "32", "--evaluation_strategy", "no",
        "--per_device_eval_batch_size", "64"]
LAUNCHERS = {"inline": ["--launcher", "inline"],
             "local, 2 at once, 1 thread each": ["--launcher", "local", "--max_parallel", "2", "--cpus_per_stage", "1"],
             "slurm (one job per stage)": ["--launcher", "slurm", "--slurm_cpus_per_stage", "1"]}


def stage_seconds(pair_dir):
    return {p.parent.name: json.loads(p.read_text())["seconds"] for p in pair_dir.glob("*/stage.json")}


def critical_path(grid_dir):
    """max over pairs of avgs + sort + the longest probing stage, from the stamps' wall times."""
    paths = {}
    for pair in (p for p in grid_dir.glob("*/*") if (p / "avgs" / "stage.json").exists()):
        seconds = stage_seconds(pair)
        probing = [s for name, s in seconds.items() if name not in ("avgs", "sort")]
        paths[pair.name] = seconds["avgs"] + seconds["sort"] + max(probing)
    return max(paths.values()), paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--out", default=str(REPO / "outputs" / "launchers_grid"))
    parser.add_argument("--rounds", type=int, default=2, help="runs of each launcher; the order reverses each round")
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    runs = {name: [] for name in LAUNCHERS}
    for round_ in range(args.rounds):
        order = list(LAUNCHERS) if round_ % 2 == 0 else list(reversed(LAUNCHERS))  # drift cancels over rounds
        for name in order:
            out = Path(args.out) / name.split()[0].strip(",")
            shutil.rmtree(out, ignore_errors=True)
            argv = [sys.executable, str(REPO / "papa_scripts" / "run_papa_sweep.py"), "--data_dir", args.data_dir,
                    "--output_dir", str(out), *GRID, *LAUNCHERS[name]]
            start = time.monotonic()
            proc = subprocess.run(argv, env=env, capture_output=True, text=True)
            seconds = time.monotonic() - start
            if proc.returncode != 0:
                sys.exit(f"error: the {name} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
            runs[name].append({"seconds": seconds, "round": round_, "load_average_1m_end": os.getloadavg()[0]})
            print(f"[launchers] round {round_ + 1}, {name}: {seconds / 60:.2f} min", flush=True)
    inline_dir = Path(args.out) / "inline"
    bound, per_pair = critical_path(inline_dir)
    serial = sum(sum(stage_seconds(p).values()) for p in inline_dir.glob("*/*") if (p / "avgs").is_dir())
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes")
    lines = ["# One small grid under each launcher", "",
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; {date}. "
             "The bundled MiniLM on CoLA, SST-2 and CoNLL-2003 NER, 200 training / 100 evaluation examples, T = 32, "
             "k = 0, 36, 72, one epoch (`benchmarks/launchers_grid.py`); the runs one after another, each into a "
             f"fresh folder, {args.rounds} rounds (the order reversed every other round).", "",
             "| launcher | wall time per round | median | speed vs inline (median) |", "| --- | --- | ---: | ---: |"]
    median = {name: statistics.median(r["seconds"] for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        each = ", ".join(f"{r['seconds'] / 60:.2f}" for r in rs)
        lines.append(f"| {name} | {each} min | {median[name] / 60:.2f} min | {median['inline'] / median[name]:.2f}x |")
    lines += ["", f"The last inline run's stages took {serial / 60:.1f} min of wall time one after another; its critical "
              f"path (per pair: averages → ranking → the longest probing run; the longest pair) is "
              f"{bound / 60:.1f} min: with unlimited parallel stages at the inline run's per-stage times, the grid "
              f"could take no less. Per pair: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in per_pair.items()) + "."]
    lines += ["", "Each run in seconds (1-minute load average at its end): " + "; ".join(
        f"{name} " + ", ".join(f"{r['seconds']:.1f} ({r['load_average_1m_end']:.2f})" for r in rs)
        for name, rs in runs.items()) + "."]
    (REPO / "benchmarks" / "results" / "launchers_grid.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
