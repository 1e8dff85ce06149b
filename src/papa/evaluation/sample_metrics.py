"""lm-eval's metrics recomputed from each document's own values (lm_eval_samples.jsonl), for paired intervals.

lm-eval keeps, per document, what its aggregation reads: acc 0 or 1 (mean), mcc and f1 a (gold, prediction) pair
(Matthews correlation and F1 of all pairs), the perplexities and bits per byte a (log-likelihood, words or bytes)
pair (exp(−Σ log-likelihood / Σ words) ...), a loglikelihood task's perplexity the target's log-likelihood
(exp(−mean)). `metric_value` aggregates them as lm-eval does, and
`paired_change` resamples the documents two runs share, together, for the change against the reference run
with a percentile interval: the same paired bootstrap as the sweep's own (papa.reporting.intervals).
"""

import math

import numpy as np

LOWER_IS_BETTER = ("word_perplexity", "byte_perplexity", "bits_per_byte", "perplexity")
PAIRED = ("mcc", "f1")


def metric_value(metric, values):
    """lm-eval's aggregate of per-document `values` for `metric`; None for a metric not known here."""
    values = list(values)
    if not values:
        return None
    if metric in PAIRED:
        from sklearn.metrics import f1_score, matthews_corrcoef

        golds, preds = zip(*values)
        return float(matthews_corrcoef(golds, preds) if metric == "mcc" else f1_score(golds, preds))
    if metric == "perplexity":  # a loglikelihood task's: exp(−mean log-likelihood of the target) over documents
        return math.exp(-float(np.mean([float(v) for v in values])))
    if metric in LOWER_IS_BETTER:
        loglikelihood, size = (float(sum(column)) for column in zip(*values))
        if metric == "bits_per_byte":
            return -loglikelihood / size / math.log(2)
        return math.exp(-loglikelihood / size)
    if all(isinstance(v, (int, float)) for v in values):
        return float(np.mean(values))
    return None


def direction(metric):
    """+1 where higher is better, −1 where lower is (papa.reporting.results.relative_change)."""
    return -1 if metric in LOWER_IS_BETTER else 1


def relative(value, reference, metric):
    if value is None or reference is None or reference == 0:
        return None
    return direction(metric) * (value - reference) / abs(reference)


def paired_change(metric, values, reference, samples=1000, seed=0):
    """(change, low, high): the relative change in performance of `values` ({doc_id: value}) against `reference`
    (same), negative = worse, over the documents both have, with a 95% percentile interval from `samples`
    resamples of those documents; (None, None, None) when undefined."""
    shared = sorted(set(values) & set(reference))
    if not shared:
        return None, None, None
    a, b = [values[d] for d in shared], [reference[d] for d in shared]
    change = relative(metric_value(metric, a), metric_value(metric, b), metric)
    if change is None:
        return None, None, None
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(samples):
        pick = rng.integers(0, len(shared), len(shared))
        drawn = relative(metric_value(metric, [a[i] for i in pick]), metric_value(metric, [b[i] for i in pick]), metric)
        if drawn is not None and not math.isnan(drawn):
            draws.append(drawn)
    if not draws:
        return change, None, None
    low, high = np.percentile(draws, [2.5, 97.5])
    return change, float(low), float(high)
