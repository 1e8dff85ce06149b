"""The paired bootstrap over seeds and examples (papa.reporting.intervals) against independent computations: a loop over the
same draws scoring each resample with sklearn / scipy / seqeval, an exactly enumerated tiny case, hand-checkable
extremes, and the interval shrinking as the evaluation set grows."""

import itertools
import json

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import f1_score as entity_f1
from sklearn.metrics import f1_score, matthews_corrcoef

from papa.errors import PapaError
from papa.reporting import intervals
from papa.reporting.intervals import (BOOTSTRAP_SEED, draws, paired_bootstrap, percentile_interval, resampled_metric)
from papa.data.tasks import get_task

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
    """Per seed: (labels, predictions at k, predictions at k = 0), the same labels for both runs and every seed
    (one evaluation set)."""
    runs = []
    ner_labels = [[TAGS[t] for t in rng.integers(0, 5, rng.integers(2, 7))] for _ in range(n)]
    stsb_labels = rng.uniform(0, 5, n).astype(np.float32)
    class_labels = rng.integers(0, 3 if task_name == "mnli" else 2, n)
    for _ in range(num_seeds):
        if task_name == "ner":
            labels = ner_labels
            noisy = [[t if rng.random() < 0.8 else TAGS[rng.integers(0, 5)] for t in s] for s in labels]
            noisier = [[t if rng.random() < 0.6 else TAGS[rng.integers(0, 5)] for t in s] for s in labels]
            runs.append((labels, noisier, noisy))
        elif task_name == "stsb":
            labels = stsb_labels
            runs.append((labels.tolist(), (labels + rng.normal(0, 2, n)).astype(np.float32).tolist(),
                         (labels + rng.normal(0, 1, n)).astype(np.float32).tolist()))
        else:
            classes, labels = 3 if task_name == "mnli" else 2, class_labels
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
                index = examples[b]  # one example draw per resample, for every seed in it
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
    """Two seeds, three examples: every outcome of the resampling (seeds drawn with replacement, one example draw
    shared by them) enumerated with its probability, against the distribution of 20000 bootstrap statistics (the
    Kolmogorov distance of the two)."""
    correct = {  # per seed: (correct at k, correct at k = 0), per example
        0: ([1, 0, 0], [1, 1, 0]),
        1: ([0, 1, 1], [1, 1, 1]),
    }
    outcomes = {}  # statistic -> probability
    for seeds in itertools.product(range(2), repeat=2):  # the drawn seeds, each pair with probability 1/4
        for index in itertools.product(range(3), repeat=3):  # 27 equally likely example draws, shared
            changes = []
            for s in seeds:
                at_k, at_zero = correct[s]
                reference = np.mean([at_zero[i] for i in index])
                value = np.mean([at_k[i] for i in index])
                changes.append(np.nan if reference == 0 else (value - reference) / reference)
            key = round(np.mean(changes), 12)
            outcomes[key] = outcomes.get(key, 0) + 1 / 4 / 27
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


def test_seeds_that_add_nothing_do_not_narrow_the_interval():
    """Every seed is scored on the same examples, so S copies of one seed's runs carry that seed's information and
    no more: the interval stays as wide as the one seed's (drawing examples anew per seed narrowed it as 1/√S)."""
    task, rng, n = get_task("sst2"), np.random.default_rng(4), 500
    labels = rng.integers(0, 2, n)
    at_zero = np.where(rng.random(n) < 0.85, labels, 1 - labels)
    at_k = np.where(rng.random(n) < 0.9, at_zero, 1 - at_zero)
    pair = (resampled_metric(task, "accuracy", labels, at_k), resampled_metric(task, "accuracy", labels, at_zero), n)
    widths = []
    for copies in (1, 16):
        low, high = percentile_interval(paired_bootstrap([pair] * copies, 2000))
        widths.append(high - low)
    assert widths[1] == pytest.approx(widths[0], rel=0.1)  # the nested draws gave a quarter of it


def test_seeds_scored_on_other_examples_are_refused(tmp_path):
    task = get_task("sst2")
    for name, labels in (("k_0", [0, 1, 1]), ("k_1", [0, 1, 1]), ("seed_2/k_0", [1, 1, 0]), ("seed_2/k_1", [1, 1, 0])):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "eval_predictions.jsonl").write_text("".join(
            json.dumps({"index": i, "label": y, "prediction": 0}) + "\n" for i, y in enumerate(labels)))
    store = intervals.PredictionStore(task)
    runs, references = [str(tmp_path / "k_1"), str(tmp_path / "seed_2/k_1")], [str(tmp_path / "k_0"),
                                                                                 str(tmp_path / "seed_2/k_0")]
    with pytest.raises(PapaError, match="seed_2/k_1 and .*k_1 were evaluated on different examples"):
        intervals.change_distribution(store, runs, references, "eval_accuracy", 10)


@pytest.mark.parametrize("task_name, bad", [("sst2", None), ("sst2", "one"), ("stsb", [1.0]), ("ner", 3),
                                            ("lm", "x")])
def test_a_value_of_the_wrong_kind_is_one_clear_error(tmp_path, task_name, bad):
    task = get_task(task_name)
    good = {"lm": {"tokens": 7, "nll_sum": 1.5}, "ner": {"label": ["O"], "prediction": ["O"]},
            "stsb": {"label": 1.0, "prediction": 2.0}}.get(task_name, {"label": 1, "prediction": 0})
    wrong = dict(good, **{"nll_sum" if task_name == "lm" else "prediction": bad})
    (tmp_path / "eval_predictions.jsonl").write_text("".join(
        json.dumps({"index": i, **record}) + "\n" for i, record in enumerate([good, wrong, good])))
    metric = {"lm": "eval_perplexity", "ner": "eval_f1", "stsb": "eval_pearson"}.get(task_name, "eval_accuracy")
    with pytest.raises(PapaError, match=r"eval_predictions.jsonl holds a value that is not .*delete the run's folder"):
        intervals.PredictionStore(task).metric(str(tmp_path), metric)


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
