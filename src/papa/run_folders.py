"""Where a sweep's runs live, for the sweep that writes them and the reporting that reads them: the stage folders
of PAPA (k_<k>/) and of each control (<prefix>_k_<k>/, seeds suffixed _seed_<s>), the controls' names, prefixes and
labels, the random orders' folders, and the stamp a finished stage leaves (stage.json). What each control does, and
the artifacts it reads, is papa.sweep.controls'.
"""

from dataclasses import dataclass

STAMP = "stage.json"  # a finished stage's record in its folder (papa.sweep.stages writes it)


@dataclass(frozen=True)
class Control:
    name: str  # the --controls value
    prefix: str  # its stage folders: <prefix>_k_<k>
    label: str  # in tables and figures
    doing: str  # what its replaced heads do, for the stage's console line
    legend: str  # what its column means, under the results' controls table


class _Registry(dict):
    """The controls by name; besides the six fixed ones, the orderings a sweep adds (papa.sweep.orderings): a ranker's
    `ranker_<name>` and the random orders `random_order_<i>` (i ≥ 2; order 1 is `random_order`)."""

    def __missing__(self, name):
        if name.startswith("ranker_"):
            ranker = name[len("ranker_"):]
            return Control(name, ranker, f"{ranker} ranking", f"ranked by {ranker}",
                           f"the heads are taken in the order the {ranker} ranker found (sort_{ranker}/)")
        if name.startswith("random_order_") and name[len("random_order_"):].isdigit():
            i = int(name[len("random_order_"):])
            return Control(name, f"random{i}", f"random order {i}", f"taken in random order {i}",
                           f"the heads are taken in seeded random order {i} ({name}/)")
        raise KeyError(name)


CONTROLS = _Registry({c.name: c for c in (
    Control("uniform", "uniform", "uniform", "attend uniformly",
            "the replaced heads attend equally to every real token they may see (constant matrices of ones; a "
            "decoder's inside its causal band)"),
    Control("random_order", "random", "random order", "taken in a random order",
            "the heads are taken in a seeded random order (random_order/), not the ranking"),
    Control("mean_output", "mean", "mean output", "output their mean",
            "the replaced heads output their training-set mean (avgs/mean_outputs.pt)"),
    Control("zero_output", "zero", "zero output", "output 0", "the replaced heads output 0"),
    Control("first_token", "first", "first token", "attend to the first token only",
            "the replaced heads attend only to the first token"),
    Control("trained_constant", "trained", "trained constant", "attend with trained constant matrices",
            "the replaced heads' constant matrices train with the probe on the task's loss, from the averages"),
    Control("mean_corrected", "corrected", "mean corrected", "attend with constant matrices, mean-corrected",
            "the replaced heads attend with their constant matrices and add E[A V] - Ā·E[V] "
            "(avgs/output_corrections.pt)"),
    Control("optimal_output", "optimal", "optimal output", "output trained constants",
            "the replaced heads output constants trained with the probe on the task's loss, from their mean "
            "(avgs/mean_outputs.pt)"),
    Control("best_of", "bestof", "best of", "replaced by the best of three",
            "each replaced head is replaced by whichever of constant attention, mean output and mean_corrected "
            "lost least alone on the ranking data (sort/best_of.csv)"),
)})

UNIFORM_DIR, RANDOM_DIR = "uniform", "random_order"


def is_random_order(control):
    """random_order (order 1) or random_order_<i>."""
    return control == "random_order" or control.startswith("random_order_")


def is_ordering(control):
    """A control that changes only the order of the heads: a random order or another ranker."""
    return is_random_order(control) or control.startswith("ranker_")


def shares_papa_run(control, k, total_heads):
    """True when the control at k is PAPA's own run: no head replaced, or (an ordering) all of them."""
    return k == 0 or (is_ordering(control) and k == total_heads)


def run_folder(control, k, total_heads, seed=None):
    """The stage folder (under the sweep's output folder) whose eval_results.json is the control at k
    (PAPA itself for control None); `seed`: the seed of a sweep with --seeds (None: no --seeds, no suffix)."""
    suffix = "" if seed is None else f"_seed_{seed}"
    if control is None or shares_papa_run(control, k, total_heads):
        return f"k_{k}{suffix}"
    return f"{CONTROLS[control].prefix}_k_{k}{suffix}"


def random_order_dir(index):
    """The folder of random order `index` (1: random_order/, the control's)."""
    return RANDOM_DIR if index == 1 else f"{RANDOM_DIR}_{index}"


def random_order_index(control):
    """1 for random_order, i for random_order_<i>."""
    return 1 if control == "random_order" else int(control[len("random_order_"):])
