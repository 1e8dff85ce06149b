"""Pool the paired rounds of several benchmark runs (`papa-benchmark --pool a.json b.json`).

On a shared machine one run's paired interval is often wider than the effect it measures, and a
quiet spell rarely lasts long enough for a long run. Every `--json` run keeps each inference
variant's raw rounds (its times and the stock runs around them, by process), and each training
mode's (its steps and the stock probing steps around them), so rounds can be pooled afterwards:
per sequence length and variant, the paired ratios of every run's rounds, with every process of
every run its own cluster of `clustered_median_interval`. Only the paired ratio pools: an
unpaired median mixes runs whose machine speed differed.
"""

import statistics

from ..errors import PapaError
from ..io import load_json_object
from .flops import percent_of_bound
from .harness import clustered_median_interval, paired_ratios
from .report import markdown_table, percent_cell, ratio_with_interval

SAME_MODEL = ("model", "batch_size", "layers", "heads", "hidden_size", "intermediate_size")  # settings runs must share
ROW_KEYS = ("seq_len", "variant", "constant_heads", "total_heads", "median_s")  # of every inference row
ROUND_KEYS = ("seconds", "stock_beside_seconds", "process")


def _check_rounds(path, row, reference):
    """A row's raw rounds are there and complete, or one clear error (the reference row has none)."""
    rounds = row.get("rounds")
    if row["variant"] != reference and not rounds:
        raise PapaError(f"{path} has no raw rounds for '{row['variant']}' (written by an older papa-benchmark); "
                        "rerun it to pool it")
    if rounds and (any(key not in rounds for key in ROUND_KEYS) or len({len(rounds[key]) for key in ROUND_KEYS}) != 1):
        raise PapaError(f"{path}: the rounds of '{row['variant']}' are incomplete; rerun it to pool it")


def _load_run(path):
    """(run, settings, inference rows, training rows): the training rows only where the run kept their rounds
    (runs before that change did not; their inference still pools)."""
    run = load_json_object(path, "pass JSON files written by papa-benchmark --json")
    settings, rows, section = run.get("settings") or {}, run.get("inference") or [], run.get("training") or {}
    training = section.get("rows") or []
    if not any("rounds" in row for row in training if isinstance(row, dict)):
        training = []
    if not rows and not training:
        raise PapaError(f"{path} has no inference or training rounds to pool (was it run with --skip inference "
                        "training?)")
    for row in rows:
        if not isinstance(row, dict) or any(key not in row for key in ROW_KEYS):
            raise PapaError(f"{path} is not a papa-benchmark --json file (an inference row lacks {', '.join(ROW_KEYS)})")
        _check_rounds(path, row, "stock")
        if row.get("rounds") and "flop_bound_speedup" not in row:
            raise PapaError(f"{path}: the rounds of '{row['variant']}' are incomplete; rerun it to pool it")
    for row in training:
        _check_rounds(path, row, "probing")
    return run, settings, rows, [{**row, "seq_len": section.get("seq_len")} for row in training]


def _pool_rows(per_run_rows, reference):
    """Pool one section: per (T, variant), every run's paired ratios, each process of each run its own cluster."""
    pooled = {}  # (T, variant) → the row's constants, ratios, clusters, runs
    for index, rows in enumerate(per_run_rows):
        for row in rows:
            if row["variant"] == reference:
                continue
            rounds = row["rounds"]
            entry = pooled.setdefault((row["seq_len"], row["variant"]), {
                "row": row, "ratios": [], "clusters": [], "runs": 0})
            # stock beside / variant, per round; each run's processes are clusters of their own
            entry["ratios"] += paired_ratios(rounds["stock_beside_seconds"], rounds["seconds"])
            entry["clusters"] += [(index, process) for process in rounds["process"]]
            entry["runs"] += 1
    out = []
    for (T, variant), entry in sorted(pooled.items()):
        row, ratios, clusters = entry["row"], entry["ratios"], entry["clusters"]
        median, interval = statistics.median(ratios), clustered_median_interval(ratios, clusters)
        bound = row.get("flop_bound_speedup")
        out.append({
            "seq_len": T, "variant": variant,
            **{key: row[key] for key in ("constant_heads", "total_heads") if key in row},
            "runs": entry["runs"], "processes": len(set(clusters)), "rounds": len(ratios),
            "paired_speed_ratio": median, "paired_speed_ratio_ci95": interval, "flop_bound_speedup": bound,
            "paired_percent_of_bound": None if bound is None else percent_of_bound(median, bound),
            "paired_percent_of_bound_ci95": None if bound is None else [percent_of_bound(r, bound) for r in interval],
        })
    return out


def pool_runs(paths):
    """The pooled report of the runs in `paths`: {"pooled_from": [...], "settings": ..., "inference_pooled": rows,
    "training_pooled": rows} (training: the modes' probing-step ratios, from the runs that kept their rounds)."""
    if len(paths) < 2:
        raise PapaError("--pool needs at least two JSON files written by papa-benchmark --json")
    runs = [(path, *_load_run(path)) for path in paths]
    first_path, _, first_settings, _, _ = runs[0]
    for path, _, settings, _, _ in runs[1:]:
        differ = [key for key in SAME_MODEL if settings.get(key) != first_settings.get(key)]
        if settings.get("padded_rows", "all") != first_settings.get("padded_rows", "all"):  # "all" before the flag
            differ.append("padded_rows")
        if differ:
            raise PapaError(f"{path} and {first_path} benchmark different setups ({', '.join(differ)} differ); "
                            "pool only runs of the same model, batch size and padding")
    sources = [{"path": str(path), "date": (run.get("machine") or {}).get("date"), "command": settings.get("command"),
                "stock_median_s": {r["seq_len"]: r["median_s"] for r in rows if r["variant"] == "stock"},
                "probing_median_s": {r["seq_len"]: r["median_s"] for r in training if r["variant"] == "probing"}}
               for path, run, settings, rows, training in runs]
    same = {key: first_settings.get(key) for key in SAME_MODEL}
    return {"pooled_from": sources, "settings": {**same, "padded_rows": first_settings.get("padded_rows", "all")},
            "inference_pooled": _pool_rows([rows for _, _, _, rows, _ in runs], "stock"),
            "training_pooled": _pool_rows([training for _, _, _, _, training in runs], "probing")}


def pooled_markdown(results):
    s = results["settings"]
    lines = [f"# PAPA benchmark, pooled — {s['model']}", "", f"Batch {s['batch_size']}, inference rows padded: {s.get('padded_rows', 'all')}; the paired rounds of:", ""]
    for source in results["pooled_from"]:
        medians = [f"stock T={T}: {1e3 * t:.1f} ms" for T, t in source["stock_median_s"].items()]
        medians += [f"stock probing step T={T}: {1e3 * t:.1f} ms" for T, t in source["probing_median_s"].items()]
        lines.append(f"- `{source['path']}` ({source['date']}; medians {', '.join(medians)}): `{source['command']}`")

    def percent_with_interval(row):
        if row["paired_percent_of_bound"] is None:
            return ""
        low, high = (percent_cell(p) for p in row["paired_percent_of_bound_ci95"])
        return f"{percent_cell(row['paired_percent_of_bound'])} ({low}–{high})"

    def cells(r):
        bound = "" if r["flop_bound_speedup"] is None else f"{r['flop_bound_speedup']:.3f}x"
        return [r["runs"], r["processes"], r["rounds"], ratio_with_interval(r["paired_speed_ratio"],
                r["paired_speed_ratio_ci95"]), bound, percent_with_interval(r)]

    counts = ["runs", "processes", "rounds", "paired (95% CI)", "FLOP bound", "paired % of bound (95% CI)"]
    if results["inference_pooled"]:
        lines += ["", "## Inference", ""] + markdown_table(
            ["T", "variant", "constant heads", *counts],
            [[r["seq_len"], r["variant"], f"{r['constant_heads']}/{r['total_heads']}", *cells(r)]
             for r in results["inference_pooled"]])
        lines += ["", "paired = median over all pooled rounds of (mean of the stock runs just before and after the "
                      "variant) / (the variant's time); 95% interval from a two-stage bootstrap over the processes of "
                      "every run (each process its own cluster), then their rounds."]
    if results["training_pooled"]:
        lines += ["", "## One training step", ""] + markdown_table(
            ["T", "mode", *counts], [[r["seq_len"], r["variant"], *cells(r)] for r in results["training_pooled"]])
        lines += ["", "paired = median over all pooled rounds of (mean of the stock probing steps just before and "
                      "after the mode's step) / (its step's time); each run is one process, its own cluster of the "
                      "two-stage bootstrap."]
    return "\n".join(lines) + "\n"
