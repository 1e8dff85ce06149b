"""Orderings: several rankers and several random orders in one sweep, laid out as controls.

`--ranker A B ...`: A ranks PAPA's own runs (sort/, k_<k>/); each other ranker B is an ordering control
`ranker_B` (sort_B/, B_k_<k>/). `--random_orders N`: the random_order control (order 1, random_order/) and the
orders `random_order_<i>` for i = 2..N (random_order_<i>/). Orderings share PAPA's runs at k = 0 and k = all heads
(the same set of heads). What the results make of them (each ranker against every random order and their mean):
papa.reporting.orderings.
"""

from ..method.rankers import PAPER, RANKERS


def random_order_names(count):
    return ["random_order"] + [f"random_order_{i}" for i in range(2, count + 1)]


def sweep_controls(args, rankers):
    """The sweep's controls: the other rankers (`rankers`, resolved: papa.method.rankers.default_rankers), then
    --controls in their order, random_order expanded to the --random_orders orders (N > 1 adds it)."""
    controls = list(args.controls)
    if args.random_orders > 1 and "random_order" not in controls:
        controls.append("random_order")
    if "random_order" in controls:  # orders 2..N beside order 1, where it was given
        at = controls.index("random_order")
        controls[at:at + 1] = random_order_names(args.random_orders)
    return tuple([f"ranker_{r}" for r in rankers[1:]] + controls)


def ranker_flags(args, rankers):
    """{ranker: its ranking runs' flags beyond --sort_calculating True}, for each of the resolved `rankers`."""
    flags = {}
    for ranker in rankers:
        entry = RANKERS[ranker]
        own = [] if ranker == PAPER else ["--ranker", ranker, "--ranker_loss", args.ranker_loss]  # λ: the scripts' default
        if args.ranker_max_samples is not None and not entry.in_trainer:  # λ trains on the training data, as before
            own += ["--ranker_max_samples", str(args.ranker_max_samples)]
            if args.ranker_sample != "first":
                own += ["--ranker_sample", args.ranker_sample]
        if not entry.in_trainer and args.ranker_tasks:
            own += ["--ranker_tasks", *args.ranker_tasks]
        if not entry.in_trainer and args.ranker_lengths:
            own += ["--ranker_lengths", *map(str, args.ranker_lengths)]
        if args.ranker_steps is not None and entry.steps:
            own += ["--ranker_steps", str(args.ranker_steps)]
        if args.rank_kv_groups:
            own += ["--rank_kv_groups", "true"]
        if getattr(args, "head_replacements", False) and ranker == rankers[0]:  # PAPA's ranking runs (sort/)
            own += ["--head_replacements", "true"]
        if "best_of" in (args.controls or ()) and ranker == rankers[0]:  # its choice, for the best_of runs
            own += ["--best_of", "true"]
        if args.lambda_learning_rate is not None and entry.learning_rate:
            own += ["--lambda_learning_rate", repr(args.lambda_learning_rate)]
        flags[ranker] = own
    return flags


def describe(ranker, epochs, steps):
    """A ranking stage's words in the sweep's progress lines (`steps`: --ranker_steps' steps, or the epochs)."""
    return RANKERS[ranker].words.format(epochs=epochs, steps=steps)


def ranking_outputs(ranker, flags=()):
    """The files a ranking stage must leave (`flags`: its own, `ranker_flags`). Only λ's ranking run evaluates (the
    original's did): a ranker that scores on its own leaves the stock model, which k_0 evaluates already."""
    extra = ["head_replacements.csv"] if "--head_replacements" in flags else []
    extra += ["best_of.csv"] if "--best_of" in flags else []
    evaluated = ["eval_results.json"] if RANKERS[ranker].in_trainer else []
    return ["sorted_heads.json", *RANKERS[ranker].outputs, *evaluated, *extra]
