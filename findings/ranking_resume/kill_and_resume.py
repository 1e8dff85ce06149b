"""A ranking of SmolLM2 killed mid-way and run again: does it resume, and give the uninterrupted ranking?

    python findings/ranking_resume/kill_and_resume.py --work outputs/resume --data_dir ../shared/data \
        --out findings/ranking_resume/runs.md
    python findings/ranking_resume/kill_and_resume.py --work outputs/resume_one_batch --data_dir ../shared/data \
        --blocks 8 --batch_size 8 --rankers loo --out findings/ranking_resume/runs_one_batch.md

For loo and the gates on lm_qnli (T = 128): the averages once, then per ranker an uninterrupted ranking run and the
same command started, killed (SIGKILL) once its saved progress has passed half of the work (PAPA_PROGRESS_EVERY_S=0:
a save after every batch or step), and started again. Reports each run's wall time, what the killed run had saved,
whether the re-run said it resumed, and whether sorted_heads.json and head_scores.csv are the same bytes. With
--batch_size 8 and 8 blocks, loo's whole ranking is one batch: it saves after each layer's units, and the run is
killed once half of SmolLM2's 30 layers are saved.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

import torch


def ranking(args, ranker, out):
    extra = ["--ranker_steps", str(args.steps)] if ranker == "gates" else []
    return [sys.executable, "-m", "papa.cli.glue", "--model_name_or_path", "smollm2", "--task_name", "lm_qnli",
            "--data_dir", args.data_dir, "--do_train", "--max_seq_length", str(args.max_length), "--per_device_train_batch_size", "1",
            "--per_device_eval_batch_size", str(args.batch_size), "--sort_calculating", "True", "--ranker", ranker,
            "--ranker_max_samples", str(args.blocks), "--max_train_samples", str(args.blocks),
            "--static_heads_dir", os.path.join(args.work, "avgs"), "--output_dir", out, "--report_to", "none",
            "--save_strategy", "no", "--num_train_epochs", "1", *extra]


LAYERS = 30  # SmolLM2's: loo saves after each layer's units of a batch


def done_so_far(path):
    """Layers of units scored (loo: batches x LAYERS + layers of the batch under way) or steps (gates) in a saved
    ranking_progress.pt, 0 when none can be read yet."""
    try:
        state = torch.load(path, weights_only=True)["state"]
    except Exception:
        return 0
    return max([v["batches"] * LAYERS + v.get("layers", 0) if "batches" in v else v.get("step", 0)
                for v in state.values()] or [0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="a folder for the runs")
    parser.add_argument("--data_dir", default="../shared/data")
    parser.add_argument("--max_length", type=int, default=128, help="tokens per block (T)")
    parser.add_argument("--average_blocks", type=int, default=16, help="blocks the attention is averaged over")
    parser.add_argument("--blocks", type=int, default=4, help="ranking blocks (loo: --batch_size a batch)")
    parser.add_argument("--batch_size", type=int, default=1, help="examples per loo batch (8 with 8 blocks: one batch)")
    parser.add_argument("--steps", type=int, default=8, help="the gates' training steps")
    parser.add_argument("--rankers", nargs="+", default=["loo", "gates"], choices=["loo", "gates"])
    parser.add_argument("--out", required=True, help="the markdown report")
    args = parser.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    avgs = os.path.join(args.work, "avgs")
    if not os.path.isfile(os.path.join(avgs, "avgs.pt")):
        subprocess.run([sys.executable, "-m", "papa.cli.glue_avgs", "--model_name_or_path", "smollm2", "--task_name",
                        "lm_qnli", "--data_dir", args.data_dir, "--max_length", str(args.max_length),
                        "--max_train_samples", str(args.average_blocks),
                        "--output_dir", avgs], check=True, env=env, capture_output=True)
    lines = ["| ranker | uninterrupted (s) | killed after (s) | saved when killed | re-run (s) | re-run resumed | "
             "same sorted_heads.json and head_scores.csv |", "| --- | ---: | ---: | --- | ---: | --- | --- |"]
    batches = -(-args.blocks // args.batch_size)
    for ranker, total in (("loo", batches * LAYERS), ("gates", args.steps)):
        if ranker not in args.rankers:
            continue
        whole, killed = os.path.join(args.work, f"{ranker}_whole"), os.path.join(args.work, f"{ranker}_killed")
        start = time.monotonic()
        subprocess.run(ranking(args, ranker, whole), check=True, env=env, capture_output=True)
        uninterrupted = time.monotonic() - start
        start = time.monotonic()
        proc = subprocess.Popen(ranking(args, ranker, killed), env=dict(env, PAPA_PROGRESS_EVERY_S="0"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        progress = os.path.join(killed, "ranking_progress.pt")
        while done_so_far(progress) < total // 2 and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_after, saved = time.monotonic() - start, done_so_far(progress)
        start = time.monotonic()
        again = subprocess.run(ranking(args, ranker, killed), check=True, env=env, capture_output=True, text=True)
        rerun = time.monotonic() - start
        resumed = "resuming the ranking" in again.stdout + again.stderr
        same = all(open(os.path.join(whole, n), "rb").read() == open(os.path.join(killed, n), "rb").read()
                   for n in ("sorted_heads.json", "head_scores.csv"))
        saved = (f"{saved // LAYERS} of {batches} batches and {saved % LAYERS} of {LAYERS} layers" if ranker == "loo"
                 else f"{saved} of {total} steps")
        lines.append(f"| {ranker} | {uninterrupted:.0f} | {killed_after:.0f} | {saved} | {rerun:.0f} | "
                     f"{'yes' if resumed else 'no'} | {'yes' if same else 'no'} |")
    report = "\n".join(lines) + "\n"
    from papa.io import save_text

    save_text(report, args.out)
    print(report)


if __name__ == "__main__":
    main()
