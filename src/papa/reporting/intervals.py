"""Paired bootstrap intervals on relative changes: how sure the sweep is that k heads cost X%.

A change at k is measured per seed, `±(m_k − m_0) / |m_0|` on the same evaluation examples (− for a metric
where lower is better, so a change is always one in performance, negative = worse), and its
point estimate is the mean over seeds. Every seed is scored on the same evaluation set, so seeds and
examples are crossed, not nested: one bootstrap resample draws the seeds with replacement and, once,
the evaluation examples with replacement; those example indices score every drawn seed's run at k and
its k = 0 run (paired: the examples' own difficulty cancels), and the statistic is the mean over the
drawn seeds of the per-seed change. (Drawing examples anew for each seed would average the evaluation
set's own sampling noise over seeds that share it, and narrow the interval as 1/√seeds.) The 95% interval
is the 2.5th and 97.5th percentile of `samples` such statistics (`percentile_interval`). One seed: the
interval is over examples alone.

A metric that is not a mean of per-example scores is recomputed on every resample, vectorised over
resamples: from per-example additive columns summed with one matrix product (accuracy, binary F1,
MSE, Pearson; Matthews from the confusion counts; seqeval's entity F1 from each sentence's true-positive,
predicted and gold entity counts; lm's perplexity exp(Σ nll / Σ tokens) from each block's nll_sum and
tokens), or from ranks row by row (Spearman). The draws come from a
`numpy.random.Generator` seeded with BOOTSTRAP_SEED and the task's name (`task_seed`), so the same
predictions give the same bytes, and two tasks' resamples are independent (a grid averages them).
"""

import os
import zlib

import numpy as np

from ..errors import PapaError
from ..runs.predictions import as_arrays, identity_keys, metric_file, read_predictions, record_keys, scored_keys

BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
CHUNK_ELEMENTS = 2_000_000  # example indices drawn at once: bounds memory whatever the evaluation set's size
MIN_DEFINED = 0.5  # fewer resamples with a defined change than this fraction: no interval


def _ratio(numerator, denominator, undefined=0.0):
    """numerator / denominator, `undefined` where the denominator is 0 (as sklearn's and seqeval's zero_division)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator == 0, undefined, numerator / np.where(denominator == 0, 1, denominator))


def resample_counts(index, n):
    """(r, n) how many times each example is drawn in each resample, from example indices (r, n)."""
    r = index.shape[0]
    return np.bincount((np.arange(r)[:, None] * n + index).ravel(), minlength=r * n).reshape(r, n)


def additive(columns, finish):
    """A resampled metric from per-example columns (n, c): `finish(column sums (r, c), n)` on each resample."""
    columns = np.asarray(columns, dtype=np.float64)

    def on_resamples(index):
        n = columns.shape[0]
        return finish(resample_counts(index, n) @ columns, n)
    return on_resamples


def _matthews(sums, n, classes):
    confusion = sums.reshape(-1, classes, classes)  # (r, true, predicted)
    true_sum, pred_sum = confusion.sum(2), confusion.sum(1)
    correct = np.trace(confusion, axis1=1, axis2=2)
    cov_tp = correct * n - (true_sum * pred_sum).sum(1)
    cov_pp, cov_tt = n * n - (pred_sum ** 2).sum(1), n * n - (true_sum ** 2).sum(1)
    return _ratio(cov_tp, np.sqrt(cov_tt * cov_pp))


def _pearson(sums, n, undefined=np.nan):
    sx, sy, sxx, syy, sxy = sums.T
    covariance, var_x, var_y = sxy - sx * sy / n, sxx - sx * sx / n, syy - sy * sy / n
    return _ratio(covariance, np.sqrt(np.clip(var_x * var_y, 0, None)), undefined)


def _pearson_columns(x, y):
    x, y = x - x.mean(), y - y.mean()  # centred once: the sums stay well conditioned
    return np.stack([x, y, x * x, y * y, x * y], axis=1)


def entity_counts(labels, predictions):
    """(n, 3) per sentence: entities found exactly (type and span), predicted, gold — as seqeval counts them."""
    from seqeval.metrics.sequence_labeling import get_entities

    counts = []
    for gold_tags, predicted_tags in zip(labels, predictions):
        gold, predicted = set(get_entities(list(gold_tags))), set(get_entities(list(predicted_tags)))
        counts.append((len(gold & predicted), len(predicted), len(gold)))
    return np.asarray(counts, dtype=np.float64).reshape(-1, 3)


def resampled_metric(task, metric, labels, predictions, correct=None):
    """f(example indices (r, n)) -> the metric on each resample (r,); None for a metric without a recipe.
    lm: `labels` are the blocks' token counts, `predictions` their nll sums (papa.runs.predictions.record_keys),
    `correct` a retrieval task's argmax hits per example (papa.runs.predictions.scored_keys)."""
    if task.kind == "lm":
        tokens = np.asarray(labels, dtype=np.float64)
        hits = np.zeros_like(tokens) if correct is None else np.asarray(correct, dtype=np.float64)
        columns = np.stack([np.asarray(predictions, dtype=np.float64), tokens, hits, hits == tokens], axis=1)
        recipes = {"loss": lambda s, n: s[:, 0] / s[:, 1], "perplexity": lambda s, n: np.exp(s[:, 0] / s[:, 1])}
        if correct is not None:
            recipes.update(token_accuracy=lambda s, n: s[:, 2] / s[:, 1], exact_match=lambda s, n: s[:, 3] / n)
        return additive(columns, recipes[metric]) if metric in recipes else None
    if task.kind == "token":
        if metric != "f1":
            return None
        return additive(entity_counts(labels, predictions), lambda s, n: _ratio(2 * s[:, 0], s[:, 1] + s[:, 2]))
    p, y = as_arrays(task, labels, predictions)
    if metric == "accuracy":
        return additive((p == y)[:, None], lambda s, n: s[:, 0] / n)
    if metric == "f1":  # binary, positive label 1, as sklearn's f1_score
        columns = np.stack([(p == 1) & (y == 1), (p == 1) & (y != 1), (p != 1) & (y == 1)], axis=1)
        return additive(columns, lambda s, n: _ratio(2 * s[:, 0], 2 * s[:, 0] + s[:, 1] + s[:, 2]))
    if metric == "matthews_correlation":
        classes = int(max(p.max(), y.max())) + 1
        one_hot = np.eye(classes * classes)[y * classes + p]  # (n, C·C): the example's confusion cell
        return additive(one_hot, lambda s, n: _matthews(s, n, classes))
    if metric == "mse":
        return additive(((p.astype(np.float64) - y) ** 2)[:, None], lambda s, n: s[:, 0] / n)
    if metric == "pearson":
        return additive(_pearson_columns(p.astype(np.float64), y.astype(np.float64)), _pearson)
    if metric == "spearmanr":
        from scipy.stats import rankdata

        def spearman(index):  # the Pearson correlation of each resample's ranks (ties: average ranks)
            rx, ry = rankdata(p[index], axis=1), rankdata(y[index], axis=1)
            rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
            return _ratio((rx * ry).sum(1), np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1)), np.nan)
        return spearman
    return None


def task_seed(task):
    """The bootstrap's seed for a task's changes: fixed, and a different stream for each task."""
    return [BOOTSTRAP_SEED, zlib.crc32(task.name.encode())]


def draws(rng, num_seeds, num_examples, samples):
    """Yield the resamples in chunks: (drawn seed positions (c, S), example indices (c, n), shared by the
    resample's seeds), c ≤ the rest."""
    chunk = max(1, CHUNK_ELEMENTS // num_examples)
    for start in range(0, samples, chunk):
        c = min(chunk, samples - start)
        yield rng.integers(0, num_seeds, size=(c, num_seeds)), rng.integers(0, num_examples, size=(c, num_examples))


def paired_bootstrap(pairs, samples, seed=BOOTSTRAP_SEED, direction=1):
    """The bootstrap statistics (samples,): `pairs` is, per seed, (metric at k, metric at k = 0, n): the two as
    functions of example indices (r, n) (resampled_metric) over the same n examples; `direction` -1 for a metric
    where lower is better (the change's sign, as papa.reporting.results.relative_change). NaN where a change is
    undefined (the k = 0 metric of a resample is 0, or a correlation of a constant)."""
    if not pairs:
        raise PapaError("a bootstrap needs at least one seed")
    sizes = sorted({n for _, _, n in pairs})
    if len(sizes) > 1:
        raise PapaError(f"the seeds' runs were evaluated on different numbers of examples ({sizes}); redo them with "
                        "the same --max_eval_samples")
    rng, stats, num_examples = np.random.default_rng(seed), [], sizes[0]
    for seed_positions, examples in draws(rng, len(pairs), num_examples, samples):
        change = np.empty(seed_positions.shape)  # (c, S): the per-seed change of each drawn seed
        for s, (at_k, at_zero, _) in enumerate(pairs):
            drawn = seed_positions == s  # (c, S)
            rows = drawn.any(axis=1)  # the resamples that drew seed s, once or more
            if rows.any():
                index = examples[rows]  # (m, n): the resample's examples, for k and for k = 0
                value, reference = at_k(index), at_zero(index)
                per_row = np.full(len(rows), np.nan)
                with np.errstate(divide="ignore", invalid="ignore"):
                    per_row[rows] = direction * (value - reference) / np.abs(reference)
                change = np.where(drawn, per_row[:, None], change)
        stats.append(change.mean(axis=1))
    return np.concatenate(stats)


def percentile_interval(stats, confidence=CONFIDENCE):
    """(low, high) percentile interval of the finite statistics; None when too few are defined."""
    stats = np.asarray(stats, dtype=np.float64)
    finite = stats[np.isfinite(stats)]
    if finite.size == 0 or finite.size < MIN_DEFINED * stats.size:
        return None
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


class PredictionStore:
    """Each run's resampled metrics, read once from its eval_predictions*.jsonl (papa.runs.predictions)."""

    def __init__(self, task):
        self.task, self.cache = task, {}

    def metric(self, folder, metric):
        """(f(example indices) -> metric, what names its examples) of the run in `folder` for an eval_results key;
        the function is None for a metric without a recipe. The examples are named by their labels (lm: token
        counts and block digests, papa.runs.predictions.identity_keys)."""
        key = (folder, metric)
        if key not in self.cache:
            file, name = metric_file(metric)
            path = os.path.join(folder, file)
            extra = scored_keys(self.task)
            labels, predictions, *rest = read_predictions(path, record_keys(self.task), extra + identity_keys(self.task))
            scored, identities = rest[:len(extra)], rest[len(extra):]
            examples = list(zip(labels, *identities)) if identities else labels
            try:
                resampled = resampled_metric(self.task, name, labels, predictions, *scored)
            except (ValueError, TypeError) as err:  # a value of the wrong kind (null, text, a list for a number)
                raise PapaError(f"{path} holds a value that is not a {self.task.name} label or prediction ({err}); "
                                "delete the run's folder to redo it") from None
            self.cache[key] = (resampled, examples)
        return self.cache[key]


def mean_across_interval(stats):
    """The interval of the mean of several tasks' statistics, resample by resample (their bootstrap draws are
    independent across tasks): None unless every task has a distribution and all have the same number of resamples."""
    if not stats or any(s is None for s in stats) or len({len(s) for s in stats}) > 1:
        return None
    return percentile_interval(np.mean(stats, axis=0))


def change_distribution(store, folders, reference_folders, metric, samples):
    """The bootstrap statistics of the mean relative change of `metric` (an eval_results key): run `folders[i]`
    against `reference_folders[i]` (k = 0), one pair per seed; None when the metric has no recipe."""
    pairs, first = [], None
    what = "labels" if store.task.kind != "lm" else "blocks"
    for folder, reference in zip(folders, reference_folders):
        (at_k, examples), (at_zero, reference_examples) = store.metric(folder, metric), store.metric(reference, metric)
        if at_k is None:
            return None
        first = first or (folder, examples)
        # the bootstrap scores every seed's runs, k and k = 0, on the same example indices
        for other, other_examples in ((reference, reference_examples), first):
            if examples != other_examples:
                raise PapaError(f"{folder} and {other} were evaluated on different examples (their "
                                f"{metric_file(metric)[0]} {what} differ); delete one to redo it on the same data")
        pairs.append((at_k, at_zero, len(examples)))
    return paired_bootstrap(pairs, samples, seed=task_seed(store.task), direction=store.task.direction(metric))


def change_text(change, low=None, high=None):
    """A relative change in percent, with its interval when known: `-1.3% [-2.1, -0.4]*`, the * when it excludes 0."""
    if change is None:
        return "–"
    if low is None or high is None:
        return f"{100 * change:+.1f}%"
    return f"{100 * change:+.1f}% [{100 * low:+.1f}, {100 * high:+.1f}]" + ("*" if low > 0 or high < 0 else "")
