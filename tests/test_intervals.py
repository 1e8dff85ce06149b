"""The paired hierarchical bootstrap (papa.sweep.intervals) against independent computations: a loop over the
same draws scoring each resample with sklearn / scipy / seqeval, an exactly enumerated tiny case, hand-checkable
extremes, and the interval shrinking as the evaluation set grows."""

import itertools

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import f1_score as entity_f1
from sklearn.metrics import f1_score, matthews_corrcoef

from papa.errors import PapaError
from papa.sweep import intervals
from papa.sweep.intervals import (BOOTSTRAP_SEED, draws, paired_bootstrap, percentile_interval, resampled_metric)
from papa.tasks import get_task

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def reference_metric(metric, labels, predictions):
    """The metric of one resample, computed the usual way."""
    if metric == "entity_f1":
        return entity_f1(labels, predictions)
    p, y = np.asarray(predictions), np.asarray(labels)
    return {"accuracy": lambda: float((p == y).mean()), "f1": lambda: f1_score(y, p),
            "matthews_correlation": lambda: matthews_corrcoef(y, p), "mse": lambda: float(((p - y) ** 2).mean()),
            "pearson": lambda: pearsonr(p, y)[0], "spearmanr": lambda: spearmanr(p, y)[0]}[metric]()


def fake_runs(task_name, num_seeds, n, rng):
    """Per seed: (labels, predictions at k, predictions at k = 0), the same labels for both runs."""
    runs = []
    for _ in range(num_seeds):
        if task_name == "ner":
            labels = [[TAGS[t] for t in rng.integers(0, 5, rng.integers(2, 7))] for _ in range(n)]
            noisy = [[t if rng.random() < 0.8 else TAGS[rng.integers(0, 5)] for t in s] for s in labels]
            noisier = [[t if rng.random() < 0.6 else TAGS[rng.integers(0, 5)] for t in s] for s in labels]
            runs.append((labels, noisier, noisy))
        elif task_name == "stsb":
            labels = rng.uniform(0, 5, n).astype(np.float32)
            runs.append((labels.tolist(), (labels + rng.normal(0, 2, n)).astype(np.float32).tolist(),
                         (labels + rng.normal(0, 1, n)).astype(np.float32).tolist()))
        else:
            classes = 3 if task_name == "mnli" else 2
            labels = rng.integers(0, classes, n)
            flip = lambda q: np.where(rng.random(n) < q, rng.integers(0, classes, n), labels)  # noqa: E731
            runs.append((labels.tolist(), flip(0.6).tolist(), flip(0.3).tolist()))
    return runs


def brute_force(task, metric, runs, samples):
    """The statistic of each resample by loops, from the same draws, with the reference metrics."""
    n = len(runs[0][0])
    name = "entity_f1" if task.kind == "token" else metric
    stats = []
    for seed_positions, examples in draws(np.random.default_rng(BOOTSTRAP_SEED), len(runs), n, samples):
        for b in range(seed_positions.shape[0]):
            changes = []
            for j in range(len(runs)):
                labels, at_k, at_zero = runs[seed_positions[b, j]]
                index = examples[b, j]
                pick = lambda values: [values[i] for i in index]  # noqa: E731
                value = reference_metric(name, pick(labels), pick(at_k))
                reference = reference_metric(name, pick(labels), pick(at_zero))
                changes.append((value - reference) / abs(reference) if reference else np.nan)
            stats.append(np.mean(changes))
    return np.array(stats)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("task_name, metric", [("cola", "matthews_correlation"), ("mrpc", "f1"),
                                               ("mrpc", "accuracy"), ("mnli", "matthews_correlation"),
                                               ("stsb", "pearson"), ("stsb", "spearmanr"), ("stsb", "mse"),
                                               ("ner", "f1")])
def test_bootstrap_equals_a_loop_over_the_same_draws(task_name, metric):
    task, rng = get_task(task_name), np.random.default_rng(1)
    runs = fake_runs(task_name, 3, 25, rng)
    pairs = [(resampled_metric(task, metric, labels, at_k), resampled_metric(task, metric, labels, at_zero),
              len(labels)) for labels, at_k, at_zero in runs]
    stats = paired_bootstrap(pairs, 30)
    assert stats.shape == (30,) and np.isfinite(stats).all()
    np.testing.assert_allclose(stats, brute_force(task, metric, runs, 30), rtol=1e-9, atol=1e-12)
    # the full set (every example once) gives each run's own metric
    full = np.arange(25)[None]
    labels, at_k, _ = runs[0]
    expected = reference_metric("entity_f1" if task.kind == "token" else metric, labels, at_k)
    assert pairs[0][0](full)[0] == pytest.approx(expected, rel=1e-9)


def test_chunks_do_not_change_the_statistics(monkeypatch):
    task, rng = get_task("sst2"), np.random.default_rng(2)
    runs = fake_runs("sst2", 2, 40, rng)
    pairs = [(resampled_metric(task, "accuracy", y, k), resampled_metric(task, "accuracy", y, z), 40)
             for y, k, z in runs]
    whole = paired_bootstrap(pairs, 50)
    monkeypatch.setattr(intervals, "CHUNK_ELEMENTS", 2 * 40 * 7)  # 7 resamples per chunk, other draws
    chunked = paired_bootstrap(pairs, 50)
    assert chunked.shape == whole.shape and np.isfinite(chunked).all()
    np.testing.assert_allclose(chunked, brute_force(task, "accuracy", runs, 50))


def test_exactly_enumerated_two_seeds_three_examples():
    """Two seeds, three examples: every outcome of the hierarchical resampling enumerated with its probability,
    against the distribution of 20000 bootstrap statistics (the Kolmogorov distance of the two)."""
    correct = {  # per seed: (correct at k, correct at k = 0), per example
        0: ([1, 0, 0], [1, 1, 0]),
        1: ([0, 1, 1], [1, 1, 1]),
    }
    outcomes = {}  # statistic -> probability
    for seeds in itertools.product(range(2), repeat=2):  # the drawn seeds, each pair with probability 1/4
        per_seed = []
        for s in seeds:
            at_k, at_zero = correct[s]
            changes = []
            for index in itertools.product(range(3), repeat=3):  # 27 equally likely example draws
                reference = np.mean([at_zero[i] for i in index])
                value = np.mean([at_k[i] for i in index])
                changes.append(np.nan if reference == 0 else (value - reference) / reference)
            per_seed.append(changes)
        for a, b in itertools.product(*per_seed):
            key = round((a + b) / 2, 12)
            outcomes[key] = outcomes.get(key, 0) + 1 / 4 / 27 / 27
    defined = {v: p for v, p in outcomes.items() if not np.isnan(v)}
    total = sum(defined.values())
    values = np.array(sorted(defined))
    exact_cdf = np.cumsum([defined[v] / total for v in values])

    task = get_task("sst2")
    pairs = []
    for s in (0, 1):
        at_k, at_zero = correct[s]
        labels = [1, 1, 1]
        pairs.append((resampled_metric(task, "accuracy", labels, at_k),
                      resampled_metric(task, "accuracy", labels, at_zero), 3))
    stats = paired_bootstrap(pairs, 20000)
    finite = np.sort(stats[np.isfinite(stats)])
    assert abs(1 - finite.size / stats.size - (1 - total)) < 0.01  # undefined: some k=0 resample scores 0
    empirical_cdf = np.searchsorted(finite, values + 1e-9, side="right") / finite.size
    assert np.max(np.abs(empirical_cdf - exact_cdf)) < 0.015
    low, high = percentile_interval(stats)
    assert values[np.searchsorted(exact_cdf, 0.015)] <= low <= values[np.searchsorted(exact_cdf, 0.035)]
    assert values[np.searchsorted(exact_cdf, 0.965)] <= high <= values[np.searchsorted(exact_cdf, 0.985)]


def test_hand_checkable_extremes():
    task = get_task("sst2")
    labels, right, wrong = [1, 0, 1, 1, 0], [1, 0, 1, 1, 0], [0, 1, 0, 0, 1]
    same = (resampled_metric(task, "accuracy", labels, right), resampled_metric(task, "accuracy", labels, right), 5)
    assert percentile_interval(paired_bootstrap([same, same], 200)) == (0.0, 0.0)
    lost = (resampled_metric(task, "accuracy", labels, wrong), resampled_metric(task, "accuracy", labels, right), 5)
    assert percentile_interval(paired_bootstrap([lost], 200)) == (-1.0, -1.0)  # every resample loses all of it
    assert percentile_interval([np.nan] * 6 + [0.1] * 4) is None  # mostly undefined: no interval
    with pytest.raises(PapaError, match="different numbers of examples"):
        paired_bootstrap([same, lost[:2] + (4,)], 10)


def test_the_interval_shrinks_as_examples_grow():
    task, widths = get_task("sst2"), []
    for n in (50, 5000):
        rng = np.random.default_rng(3)
        labels = rng.integers(0, 2, n)
        at_zero = np.where(rng.random(n) < 0.85, labels, 1 - labels)  # ~85% right
        at_k = np.where(rng.random(n) < 0.9, at_zero, 1 - at_zero)  # ~10% of them flipped
        pair = (resampled_metric(task, "accuracy", labels, at_k),
                resampled_metric(task, "accuracy", labels, at_zero), n)
        low, high = percentile_interval(paired_bootstrap([pair], 1000))
        widths.append(high - low)
    assert widths[1] < widths[0] / 5  # ~√100 = 10 times narrower
