"""The rankers, one registry: which heads to make constant first, by name, with what each reads and writes.

A `Ranker` says everything the scripts and the sweep need to know of one: how the sweep describes its stage, whether
it trains inside HF's Trainer (λ, the original's) or scores on its own (papa.method.scorers), which of the shared
options it takes (steps, a learning rate, parts), whether it has a signal under the distillation loss, the files it
writes beside sorted_heads.json, and its scorer. Adding a ranker is one entry in `RANKERS`; a ranker's name is
written nowhere else (tests/test_house.py checks).
"""

from dataclasses import dataclass, field

from ..errors import PapaError
from .retrieval_heads import retrieval_scores, unit_scores
from .scorers import NO_PROGRESS, Scored, iterative_ranking, loo_scores, taylor_scores, train_gates


@dataclass(frozen=True)
class Ranker:
    name: str
    words: str  # the sweep's progress line; {epochs} and {steps} filled in
    in_trainer: bool = False  # trains with the probe in HF's Trainer (λ): no scorer, lambdas.npy beside the ranking
    steps: bool = False  # reads --ranker_steps
    learning_rate: bool = False  # reads --lambda_learning_rate
    distill: bool = True  # has a signal under --ranker_loss distill (taylor's gradient of it is 0 at the stock model)
    parts: object = field(default=None, compare=False)  # (objective, units, options) → a score per unit, for a
    # ranker whose unit's score depends on that unit alone: its units can be scored in parts (--ranker_parts)
    needs_retrieval: bool = False  # reads a retrieval task's needle spans (papa.data.retrieval): refused elsewhere
    logs_batches: bool = False  # reports each batch it has scored
    outputs: tuple = ("head_scores.csv",)  # the files its stage must leave beside sorted_heads.json, eval_results.json
    score: object = field(default=None, compare=False)  # (objective, units, options) → Scored


def _sorted(units, scores, extra=None):
    """Scored in ascending score (ties keep layer-major order)."""
    order = sorted(range(len(units)), key=lambda u: (float(scores[u]), u))
    return Scored([units[u] for u in order], [float(scores[u]) for u in order],
                  {k: [float(v[u]) for u in order] for k, v in (extra or {}).items()})


def _taylor(objective, units, options):
    absolute, signed = taylor_scores(objective, units, progress=options.get("progress", NO_PROGRESS))
    return _sorted(units, absolute, {"first_order_estimate": signed})


def _loo_part(objective, units, options):
    return loo_scores(objective, units, reuse_prefix=options.get("reuse_prefix", True),
                      max_rows=options.get("max_rows", 64), log=options.get("log"),
                      progress=options.get("progress", NO_PROGRESS))


def _loo(objective, units, options):
    return _sorted(units, _loo_part(objective, units, options))


def _iterative(exact):
    def score(objective, units, options):
        loo = {k: options[k] for k in ("reuse_prefix", "max_rows") if k in options}
        return iterative_ranking(objective, units, exact, options.get("progress", NO_PROGRESS), **loo)
    return score


def _retrieval(objective, units, options):
    hard, soft = unit_scores(units, *retrieval_scores(objective))
    order = sorted(range(len(units)), key=lambda u: (hard[u], soft[u], u))  # least retrieving first
    return Scored([units[u] for u in order], [hard[u] for u in order], {"soft": [soft[u] for u in order]})


GATES_LEARNING_RATE, GATES_L1 = 0.02, 0.05  # DuoAttention's


def _gates(objective, units, options):
    return _sorted(units, train_gates(objective, units, options["steps"], options.get("learning_rate") or
                                      GATES_LEARNING_RATE, options.get("l1", GATES_L1), options.get("log"),
                                      options.get("progress", NO_PROGRESS)))


RANKERS = {r.name: r for r in (
    Ranker("lambda", "λ mixing run, {epochs}", in_trainer=True, learning_rate=True, distill=False,
           outputs=("lambdas.npy",)),
    Ranker("gates", "gates trained for {steps}", steps=True, learning_rate=True, score=_gates),
    Ranker("taylor", "taylor, one pass", distill=False, score=_taylor),
    Ranker("loo", "loo: each head constant alone", parts=_loo_part, logs_batches=True, score=_loo),
    Ranker("iterative", "iterative loo, ten rounds", score=_iterative(exact=True)),
    Ranker("iterative_taylor", "iterative taylor, ten rounds", distill=False, score=_iterative(exact=False)),
    Ranker("retrieval", "retrieval-head score, one pass", needs_retrieval=True, score=_retrieval),
)}
PAPER, DECODER = "lambda", "taylor"  # the defaults: the paper's ranker on an encoder; a decoder's (default_rankers)


def ranker(name):
    """The registry's entry for `name`, or a PapaError listing them."""
    if name not in RANKERS:
        raise PapaError(f"unknown ranker {name!r}; choose one of {', '.join(RANKERS)}")
    return RANKERS[name]


def rank(name, objective, units, **options):
    """Scored units of ranker `name` (one that scores on its own; λ trains in the Trainer: papa.runs.ranking).
    `progress`: where the ranking saves and resumes its work (papa.method.ranking_progress)."""
    entry = ranker(name)
    if entry.score is None:
        raise PapaError(f"--ranker {name} trains inside the Trainer: it has no scorer of its own")
    return entry.score(objective, units, options)


def default_rankers(causal, ranker_loss="task"):
    """The ranking when --ranker is not given: λ on an encoder, the paper's; taylor on a decoder, where λ's ranking
    sits among random orders and taylor's, at about λ's cost, beats them all (SmolLM2; docs/rankers.md)."""
    if not causal:
        return (PAPER,)
    if ranker_loss == "distill" and not RANKERS[DECODER].distill:
        raise PapaError(f"--ranker_loss distill has no signal for {DECODER}, a decoder's default ranker (its gradient "
                        f"of distillation is 0 at the stock model): add --ranker "
                        f"{', '.join(n for n, r in RANKERS.items() if r.distill)}")
    return (DECODER,)


def check_ranker_data(names, task_name, retrieval):
    """Before a stage starts: a ranker that reads a retrieval task's needles (`needs_retrieval`) on another task is
    refused, with the fix."""
    for name in names:
        if ranker(name).needs_retrieval and not retrieval:
            raise PapaError(f"--ranker {name} reads where a retrieval task's answer is copied from; {task_name} has no "
                            "such data: use --task_name passkey (or another generated retrieval task), or another "
                            "ranker")


def without_distill_signal(names):
    """The rankers among `names` that have no signal under --ranker_loss distill."""
    return [n for n in names if not ranker(n).distill]


def with_distill_signal():
    """The rankers that have a signal under --ranker_loss distill, as a message lists them ("a, b or c")."""
    names = [n for n, r in RANKERS.items() if r.distill]
    return f"{', '.join(names[:-1])} or {names[-1]}"


LAMBDA_ON_DECODER = ("note: λ's ranking of SmolLM2's heads sits among random orders, where taylor's beats them all "
                     f"(docs/rankers.md); --ranker {DECODER} ranks by loss at the same cost")
