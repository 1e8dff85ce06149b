"""The sweep's figures, drawn with matplotlib's Agg backend and written atomically as PNG.

- `plot_results`: the task's main metric against the number of constant heads (as the paper's
  Figure 2), one marker per k and a dashed line at the k=0 value, plus a line per control;
- `plot_lambdas`: layer x head heatmap of the ranking run's λ (`lambdas.npy`);
- `plot_constant_matrices`: the constant matrices (`avgs.pt`) of the first heads of
  `sorted_heads.json` (the most constant-friendly), query position x key position;
- `plot_summary`: a grid's relative change against the fraction of constant heads, one panel per
  model and one line per task (the paper's Figure 2 layout), controls in the task's colour.

Figures are built with `matplotlib.figure.Figure` directly (no pyplot global state), so plotting
works in any thread and never opens a window.
"""

import math
import os

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ..artifacts import load_lambdas  # noqa: E402
from ..errors import PapaError  # noqa: E402
from ..io import atomic_path, load_json  # noqa: E402

DPI = 120
CONTROL_STYLES = ({"linestyle": "--", "marker": "s"}, {"linestyle": ":", "marker": "^"},
                  {"linestyle": "-.", "marker": "v"}, {"linestyle": "--", "marker": "x"},
                  {"linestyle": ":", "marker": "D"}, {"linestyle": "-.", "marker": "P"})  # one per control


def _save(fig, path):
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return path


def _floats(values):
    return [math.nan if v is None else float(v) for v in values]


def _band(ax, ks, band, colour, label=None):
    """A shaded 95% interval (lows, highs) around a line, where both ends are known."""
    if band is None:
        return []
    lows, highs = _floats(band[0]), _floats(band[1])
    if all(math.isnan(v) for v in lows + highs):
        return []
    ax.fill_between(ks, lows, highs, color=colour, alpha=0.15, linewidth=0, label=label)
    return [v for v in lows + highs if not math.isnan(v)]


def plot_results(ks, values, metric_name, total_heads, title, path, chance=None, controls=None, bands=None,
                 lower_is_better=False):
    """Main metric vs number of constant heads; dashed line at the k=0 value (when there is one),
    dotted line at `chance` (e.g. 0.5 accuracy on a balanced binary task) when given; `controls`:
    {label: values at the same ks}, one thinner line each; `bands`: {None for PAPA or a control's label:
    (lows, highs)}, each change's 95% interval on the metric's axis, shaded in its line's colour.
    `lower_is_better` (perplexity): the axis says so, and the legend goes where a rising curve leaves room."""
    ks = list(ks)
    values = _floats(values)
    controls = {label: _floats(v) for label, v in (controls or {}).items()}
    bands = bands or {}
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot()
    line, = ax.plot(ks, values, marker="o", linewidth=1.8, label=f"{metric_name} (PAPA)" if controls else metric_name)
    shaded = _band(ax, ks, bands.get(None), line.get_color(), "95% interval of the change")
    for (label, points), style in zip(controls.items(), CONTROL_STYLES):
        line, = ax.plot(ks, points, linewidth=1.2, markersize=4, alpha=0.85, label=label, **style)
        shaded += _band(ax, ks, bands.get(label), line.get_color())
    below = False
    for i, (k, v) in enumerate(zip(ks, values)):
        if math.isnan(v):
            continue
        # neighbours closer than 8% of the axis (e.g. 63 and 68 of 72) alternate above/below
        below = (not below) if i and k - ks[i - 1] < 0.08 * total_heads else False
        ax.annotate(f"{v:.3f}", (k, v), textcoords="offset points", xytext=(0, -13 if below else 7),
                    ha="center", fontsize=8)
    if 0 in ks and not math.isnan(values[ks.index(0)]):
        ax.axhline(values[ks.index(0)], linestyle="--", color="gray", linewidth=1, label="k = 0 (all heads dynamic)")
    if chance is not None:
        ax.axhline(chance, linestyle=":", color="firebrick", linewidth=1, label=f"chance ({chance:g})")
    ax.set_xlabel(f"number of constant heads (of {total_heads})")
    ax.set_ylabel(f"{metric_name} (lower is better)" if lower_is_better else metric_name)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(ks)
    ax.set_xlim(-0.03 * total_heads, 1.03 * total_heads)
    finite = [v for v in values + [x for line in controls.values() for x in line] if not math.isnan(v)]
    finite += ([chance] if chance is not None else []) + shaded
    if finite:
        low, high = min(finite), max(finite)
        pad = max(0.05 * (high - low), 0.02)
        ax.set_ylim(low - pad, high + 2 * pad)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left" if lower_is_better else "lower left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_lambdas(lambdas, path, title="λ of the ranking run"):
    """Heatmap (layers x heads) of λ: head h mixes σ(λ)·softmax + (1 − σ(λ))·constant. `lambdas`: an array (or
    its .npy path), or a list of several seeds' arrays: then the heatmap is their mean, and a second panel shows
    every head's spread across the seeds (min to max), heads in the order of the mean λ."""
    arrays = lambdas if isinstance(lambdas, (list, tuple)) else [lambdas]
    arrays = [load_lambdas(a) if isinstance(a, (str, os.PathLike)) else a for a in arrays]
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    if any(a.ndim != 2 for a in arrays) or len({a.shape for a in arrays}) != 1:
        raise PapaError(f"lambdas must be [layers, heads] arrays of one shape; got {[list(a.shape) for a in arrays]}")
    mean = np.mean(arrays, axis=0)
    layers, heads = mean.shape
    spread = len(arrays) > 1
    width, height = max(5.0, 0.45 * heads + 2), max(3.0, 0.4 * layers + 1.6)
    fig = Figure(figsize=(width, height + (3.0 if spread else 0)))
    ax = fig.add_subplot(2, 1, 1) if spread else fig.add_subplot()
    image = ax.imshow(mean, cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label="λ (lower = leans on its constant matrix)" + (
        f", mean of {len(arrays)} seeds" if spread else ""))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_title(title, fontsize=10)
    if spread:
        stack = np.stack([a.reshape(-1) for a in arrays])  # (seeds, L·H)
        order = np.argsort(stack.mean(0), kind="stable")
        x = np.arange(order.size)
        ax2 = fig.add_subplot(2, 1, 2)
        ax2.fill_between(x, stack.min(0)[order], stack.max(0)[order], alpha=0.3, linewidth=0,
                         label=f"min–max over {len(arrays)} seeds")
        ax2.plot(x, stack.mean(0)[order], linewidth=1.2, label="mean")
        ax2.set_xlabel("heads, by mean λ (the first go constant first)")
        ax2.set_ylabel("λ")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return _save(fig, path)


def error_bars(y, low, high):
    """matplotlib's yerr for intervals [low, high] around y: an end that lies on the value up to float rounding
    (a bootstrap bound equal to the point estimate) is a bar of 0, not a negative one matplotlib refuses."""
    return [np.clip(y - low, 0, None), np.clip(high - y, 0, None)]


def plot_differences(ks, differences, path, title, total_heads):
    """Each control's difference from PAPA (in percentage points of the k = 0 score) against k, with its 95%
    interval as an error bar; `differences`: {label: [(value, low, high) per k]}, values as fractions."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    ax.axhline(0, color="gray", linewidth=0.9)
    width = 0.012 * total_heads
    for index, ((label, points), style) in enumerate(zip(differences.items(), CONTROL_STYLES)):
        shift = (index - (len(differences) - 1) / 2) * width  # side by side, not on top of each other
        shown = [(k + shift, 100 * v, 100 * lo, 100 * hi) for k, (v, lo, hi) in zip(ks, points)
                 if v is not None and lo is not None and hi is not None]
        if not shown:
            continue
        x, y, low, high = (np.array(v) for v in zip(*shown))
        ax.errorbar(x, y, yerr=error_bars(y, low, high), capsize=2.5, linewidth=1.0, markersize=4, label=label,
                    marker=style["marker"], linestyle=style["linestyle"])
    ax.set_xticks(ks)
    ax.set_xlabel(f"number of constant heads (of {total_heads})")
    ax.set_ylabel("control − PAPA (points of the k = 0 change, %)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _save(fig, path)


def plot_constant_matrices(avgs, sorted_heads, path, title="constant matrices", count=4):
    """The `count` first-ranked heads' constant matrices, each titled with layer, head and rank."""
    if isinstance(avgs, (str, os.PathLike)):
        from ..method.attention import load_constant_matrices

        avgs = load_constant_matrices(avgs)  # a decoder's: read a head at a time (papa.method.layouts)
    if isinstance(sorted_heads, (str, os.PathLike)):
        sorted_heads = load_json(sorted_heads, "pass the sorted_heads.json a ranking run wrote")
    chosen = [tuple(h) for h in sorted_heads[:count]]
    if not chosen:
        raise PapaError("sorted_heads is empty: no head to draw")
    cols = min(len(chosen), 2)
    rows = math.ceil(len(chosen) / cols)
    fig = Figure(figsize=(4.4 * cols, 3.9 * rows + 0.5))
    for i, (layer, head) in enumerate(chosen):
        ax = fig.add_subplot(rows, cols, i + 1)
        matrix = avgs[layer, head]  # (T, T): one head, never the whole [L, H, T, T] in float64
        image = ax.imshow(np.asarray(matrix.float() if hasattr(matrix, "float") else matrix, dtype=float),
                          cmap="magma", interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(f"layer {layer}, head {head} (rank {i + 1})", fontsize=9)
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_summary(panels, path, title="PAPA: relative change against the fraction of constant heads"):
    """One panel per model: `panels` is [(model name, {task: {variant: [(fraction, relative change), ...]}})],
    variant "PAPA" drawn solid and each control dashed or dotted in the task's colour (the legend keys tasks
    by colour, controls by style); changes are changes in performance (negative = worse, whichever way the
    metric runs) as fractions, drawn in percent. A point may carry its 95%
    interval, (fraction, change, low, high): drawn as an error bar."""
    if not panels:
        raise PapaError("no model to plot")
    cols = min(len(panels), 3)
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.2 * cols, 4.2 * rows + 0.6))
    from matplotlib.lines import Line2D

    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (model, tasks) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, index + 1)
        ax.axhline(0, color="gray", linewidth=0.8)
        task_keys, control_keys = {}, {}  # the legend: a colour per task, a line style per control
        for task_index, (task, variants) in enumerate(tasks.items()):
            colour = colours[task_index % len(colours)]
            for variant_index, (variant, points) in enumerate(variants.items()):
                bars = [(p[0], 100 * p[1], 100 * p[2], 100 * p[3]) for p in points
                        if len(p) == 4 and None not in p]
                points = [(p[0], 100 * p[1]) for p in points if p[1] is not None]
                if not points:
                    continue
                papa = variant == "PAPA"
                style = {"linestyle": "-", "marker": "o"} if papa else CONTROL_STYLES[(variant_index - 1) % len(CONTROL_STYLES)]
                ax.plot(*zip(*points), color=colour, linewidth=1.8 if papa else 1.1, markersize=5 if papa else 3.5,
                        **style)
                if bars:
                    x, y, low, high = (np.array(v) for v in zip(*bars))
                    ax.errorbar(x, y, yerr=error_bars(y, low, high), fmt="none", ecolor=colour, elinewidth=0.9,
                                capsize=2.5, alpha=0.7)
                task_keys.setdefault(task, Line2D([], [], color=colour, linewidth=1.8, marker="o"))
                if not papa:
                    control_keys.setdefault(variant, Line2D([], [], color="gray", linewidth=1.1, markersize=3.5,
                                                            **style))
        ax.set_title(model, fontsize=10)
        ax.set_xlabel("fraction of heads constant")
        ax.set_ylabel("change in performance vs k = 0 (%, negative = worse)")
        ax.set_xlim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        keys = {**task_keys, **control_keys}
        if keys:
            ax.legend(list(keys.values()), list(keys), loc="lower left", fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _save(fig, path)
