"""The sweep's controls: probing runs beside PAPA's, at the same k, that say what its result means.

    uniform       `uniform/avgs.pt` of ones: after norm(C·P) each replaced head attends equally to
                  every real token, through the same pipeline with no positional prior. Tells how
                  much of the average matrix's value is its structure.
    random_order  `random_order/sorted_heads.json`: every head in a seeded random order (the seed
                  and how the order was drawn in `random_order/random_order.json`) instead of the
                  λ ranking. Tells whether the ranking run earns its cost.
    mean_output   the averaging stage also writes `avgs/mean_outputs.pt`, and the replaced heads
                  output their training-set mean context vector per position (`--replace_heads_with
                  mean_output`; Q/K pruned as for constant heads). Tells how much the heads'
                  value-dependent mixing matters once attention is constant.
    zero_output   the replaced heads output 0 (`--replace_heads_with zero_output`): the zero ablation
                  of Michel et al. (2019), nnterp and pyvene.
    first_token   the replaced heads attend only to the first token (`--replace_heads_with
                  first_token`): the attention-sink knock-out of Penzai and StreamingLLM.
    trained_constant  the replaced heads' constant matrices train with the probe on the task's loss,
                  starting from the averages (the original's --grad_for_classifier_and_static_only; an lm
                  run trains them on the LM loss over the training blocks): the attention-level optimal
                  constant of Li & Janson (2024). Tells how far the averages are from the best constant.
    mean_corrected  the replaced heads attend with their constant matrices and add E[A V] − Ā·E[V]
                  (`avgs/output_corrections.pt`, from the same averaging pass, `--mean_corrections`), so each
                  outputs its own mean on average while its output still follows the values. Tells how much of
                  PAPA's loss is the bias of Ā·E[V] against the mean output rather than the lost dependence.
    optimal_output  the replaced heads output constants per position trained with the probe on the task's loss
                  (an lm run: alone, on the LM loss over the training blocks), starting from their mean outputs
                  (`--replace_heads_with mean_output --grad_for_classifier_and_static_only`): Li & Janson's
                  (2024) optimal ablation, never worse than the mean on the data it trains on.
    best_of       each replaced head is replaced by whichever of constant attention, mean_output and
                  mean_corrected loses least when it alone is replaced on the ranking data: PAPA's first ranking
                  run (sort/) makes the choice (`--best_of true`, `sort/best_of.csv`) after ranking, and the runs
                  read it (`--replace_heads_with best_of`). Tells what the best of the three gives, per head.

A control's runs are ordinary probing stages in `<prefix>_k_<k>/` (uniform_k_36, random_k_36,
mean_k_36, zero_k_36, first_k_36, trained_k_36, corrected_k_36,
optimal_k_36, bestof_k_36), with the same stamps and fingerprints as PAPA's, its artifact
among the fingerprinted inputs. k = 0 replaces no head, so every control shares PAPA's `k_0/`; random_order also shares PAPA's
run at k = all heads (the same set of heads, whatever their order). A control's relative change is
measured against that same k = 0 run. With --seeds every run is per seed (`uniform_k_36_seed_1`), and a
control's change is against the k = 0 run of the same seed.
"""

import os
from dataclasses import dataclass

import numpy as np
import torch

from ..runs.arguments import SWEEP_CONTROLS
from ..io import save_json, save_tensor
from ..method.layouts import packed_record, triangle_size
from ..run_folders import (CONTROLS, RANDOM_DIR, UNIFORM_DIR, is_random_order, random_order_dir, random_order_index,
                           run_folder, shares_papa_run)


assert tuple(CONTROLS) == SWEEP_CONTROLS
BEST_OF_INPUTS = ("mean_outputs.pt", "output_corrections.pt")  # from the averaging pass, beside avgs.pt


def random_order(layers, heads, seed, index=1, group=1):
    """Every head [layer, head] once, in the order of a seeded random permutation: order 1 from the seed alone (the
    random_order control's), order i from the pair (seed, i). `group` > 1 (--rank_kv_groups): the units permuted are
    a layer's K/V groups of `group` consecutive query heads, each group's heads together, as the rankers take them."""
    units = heads // group
    order = np.random.default_rng(seed if index == 1 else [seed, index]).permutation(layers * units)
    return [[int(u // units), int(u % units) * group + h] for u in order for h in range(group)]


def write_artifacts(output_dir, controls, layers, heads, seq_len, seed, causal=False, group=1):
    """The files the controls' stages read (atomically; the same inputs give the same bytes, so a rewrite
    leaves their stages up to date). causal: a decoder's, whose uniform constants are stored as lower triangles
    (papa.method.layouts, layout 2: half the bytes; the causal band zeroes the rest anyway)."""
    if "uniform" in controls:
        path = os.path.join(output_dir, UNIFORM_DIR, "avgs.pt")
        if causal:
            save_tensor(packed_record(torch.ones(layers, heads, triangle_size(seq_len)), seq_len), path)
        else:
            save_tensor(torch.ones(layers, heads, seq_len, seq_len), path)
    for control in controls:
        if not is_random_order(control):
            continue
        index = random_order_index(control)
        folder = os.path.join(output_dir, random_order_dir(index))
        save_json(random_order(layers, heads, seed, index, group), os.path.join(folder, "sorted_heads.json"))
        drawn = "seed" if index == 1 else f"[seed, {index}]"
        how = ("numpy.random.default_rng({drawn}).permutation(layers * heads); head i is [i // heads, i % heads]"
               if group == 1 else "numpy.random.default_rng({drawn}).permutation(layers * heads // group); K/V group u "
               "is heads [u // (heads // group), (u % (heads // group)) * group + h] for h < group")
        save_json({"seed": seed, "index": index, "order": how.format(drawn=drawn), "layers": layers, "heads": heads,
                   **({"group": group} if group > 1 else {})}, os.path.join(folder, "random_order.json"), indent=2)


@dataclass(frozen=True)
class Setup:
    """What a control's probing runs read and how they differ from PAPA's."""

    static_dir: str  # --static_heads_dir
    ranking_dir: str  # --sorting_heads_dir
    inputs: list  # fingerprinted: a change redoes the run
    extra: list = ()  # flags after PAPA's
    train_constants: bool = False  # --grad_for_classifier_and_static_only instead of the probe alone


def control_setups(plan, seed):
    """{control: Setup} for the runs of `seed` (the ranking is that seed's with --rank_per_seed)."""
    out = plan.output_dir
    avgs_dir, sort_dir = os.path.join(out, "avgs"), plan.ranking_folder(seed)
    ranking, avgs = os.path.join(sort_dir, "sorted_heads.json"), os.path.join(avgs_dir, plan.constants_file)
    return {
        "uniform": Setup(os.path.join(out, UNIFORM_DIR), sort_dir, [os.path.join(out, UNIFORM_DIR, "avgs.pt"), ranking]),
        "random_order": Setup(avgs_dir, os.path.join(out, RANDOM_DIR),
                              [avgs, os.path.join(out, RANDOM_DIR, "sorted_heads.json")]),
        "mean_output": Setup(avgs_dir, sort_dir, [os.path.join(avgs_dir, "mean_outputs.pt"), ranking],
                             ["--replace_heads_with", "mean_output"]),
        "zero_output": Setup(avgs_dir, sort_dir, [ranking], ["--replace_heads_with", "zero_output"]),
        "first_token": Setup(avgs_dir, sort_dir, [ranking], ["--replace_heads_with", "first_token"]),
        "trained_constant": Setup(avgs_dir, sort_dir, [avgs, ranking], train_constants=True),
        "optimal_output": Setup(avgs_dir, sort_dir, [os.path.join(avgs_dir, "mean_outputs.pt"), ranking],
                                ["--replace_heads_with", "mean_output"], train_constants=True),
        "mean_corrected": Setup(avgs_dir, sort_dir, [avgs, os.path.join(avgs_dir, "output_corrections.pt"), ranking],
                                ["--replace_heads_with", "mean_corrected"]),
        "best_of": Setup(avgs_dir, sort_dir, [avgs, *(os.path.join(avgs_dir, f) for f in BEST_OF_INPUTS), ranking,
                                              os.path.join(sort_dir, "best_of.csv")],
                         ["--replace_heads_with", "best_of"]),
    }


def control_setup(plan, seed, name):
    """The Setup of control `name` for the runs of `seed`: a fixed control's, or an ordering's."""
    out, avgs_dir = plan.output_dir, os.path.join(plan.output_dir, "avgs")
    avgs = os.path.join(avgs_dir, plan.constants_file)
    if name.startswith("ranker_"):
        folder = plan.ranking_folder(seed, name[len("ranker_"):])
        return Setup(avgs_dir, folder, [avgs, os.path.join(folder, "sorted_heads.json")])
    if name.startswith("random_order_"):
        folder = os.path.join(out, random_order_dir(random_order_index(name)))
        return Setup(avgs_dir, folder, [avgs, os.path.join(folder, "sorted_heads.json")])
    return control_setups(plan, seed)[name]


def control_stages(plan, probing):
    """The controls' probing stages, after PAPA's, per seed: `probing(name, description, k, static_dir, sort_dir,
    inputs, extra_flags, seed, tag, train_constants)` builds one (papa.sweep.run.make_stages)."""
    stages = []
    for seed, tag in plan.seed_runs:
        for name in plan.controls:
            control, setup = CONTROLS[name], control_setup(plan, seed, name)
            for k in plan.ks:
                if not shares_papa_run(name, k, plan.total_heads):
                    stages.append(probing(run_folder(name, k, plan.total_heads, tag),
                                          f"{control.label} control: k={k} heads {control.doing}",
                                          k, setup.static_dir, setup.ranking_dir, setup.inputs, setup.extra, seed,
                                          tag, setup.train_constants))
    return stages
