"""The ranking run (`--sort_calculating True`): which heads a `--static_heads_num k` run makes constant first.

`--ranker lambda` (the default) is the original's run: every head mixes σ(λ)·A + (1 − σ(λ))·norm(C), λ trains with
the probe (papa.runs.run), and `sorted_heads.json` lists the heads by ascending λ. Here it gets a learning rate of
its own (`--lambda_learning_rate`) and logs the spread of σ(λ) as it trains: a λ that hardly moves ranks by noise.

The other rankers (papa.method.rankers) score heads by the loss on the ranking data (the training split): a probe
task first trains its probe at k = 0 (the stock model, every gate at 0), then the probe stays frozen while the
heads are scored; an lm run scores the LM loss directly. The evaluation afterwards is the stock model's.

Every ranker writes `sorted_heads.json` (the original's format, so every later command reads it unchanged) and
`head_scores.csv`: rank, layer, head, the ranked unit (a head, or a K/V group with --rank_kv_groups), the ranker's
score (lower = made constant first), its extra columns, and the head's profile from its constant matrix
(papa.method.profiles).
"""

import math
import os

import numpy as np
import torch
from transformers import TrainerCallback

from ..console import stage
from ..data.retrieval import DEPTHS
from ..data.tasks import get_task
from ..errors import PapaError
from ..families import attention_modules
from ..families.structured import layer_matrices
from ..families.block_triangle import BlockTriangle, dense
from ..io import save_json, save_text
from ..method.attention import lambdas_array
from ..method.gates import set_gates
from ..method.profiles import head_kind, head_profiles
from ..method.ranking import save_ranking
from ..method.rankers import RANKERS, rank
from ..method.scorers import Objective, Scored, make_units
from ..method.ranking_progress import PROGRESS_FILE, NoProgress, Progress, fingerprint

LAMBDA_NAMES = ("lambdas",)


def ranking_units(config, model_args):
    """The units the ranker ranks: heads, or with --rank_kv_groups a decoder's K/V groups."""
    kv = getattr(config, "num_key_value_heads", None) if model_args.rank_kv_groups else None
    if model_args.rank_kv_groups and kv is None:
        raise PapaError("--rank_kv_groups ranks a decoder's K/V groups; this model has no num_key_value_heads")
    return make_units(config.num_hidden_layers, config.num_attention_heads, kv)


def model_profiles(model):
    """head_profiles of the constant matrices a mix-mode model holds, (L, H) each, read a layer at a time."""
    per_layer = []
    for module in attention_modules(model):
        if module.head_mode == "structured":  # materialised at the length their profile was averaged at
            constants = layer_matrices(module, module.structured_profile.shape[1]).detach().float()
        else:
            constants = module.constant_matrices.detach().float()
        if module.papa_block is not None:
            constants = BlockTriangle(constants, module.papa_seq_len, module.papa_block)
        constants = module.papa_stock_order(dense(constants), dim=0)
        per_layer.append(head_profiles(constants[None]))
    return {key: torch.cat([p[key] for p in per_layer]) for key in per_layer[0]}


def head_scores_csv(scored, profiles):
    """head_scores.csv's text: one row per head, in ranked order."""
    extras = list(scored.extra)
    lines = [",".join(["rank", "layer", "head", "unit", "score", *extras, "profile"])]
    rank_index = 0
    for u, unit in enumerate(scored.units):
        for layer, head in unit:
            cells = [rank_index, layer, head, u, repr(float(scored.scores[u]))]
            cells += [repr(v) if isinstance(v, float) else v for v in (scored.extra[e][u] for e in extras)]
            cells.append(head_kind(profiles, layer, head))
            lines.append(",".join(map(str, cells)))
            rank_index += 1
    return "\n".join(lines) + "\n"


def write_ranking(scored, model, output_dir):
    """sorted_heads.json and head_scores.csv, each atomically."""
    save_json(scored.sorted_heads(), os.path.join(output_dir, "sorted_heads.json"))
    save_text(head_scores_csv(scored, model_profiles(model)), os.path.join(output_dir, "head_scores.csv"))


# ----------------------------------------------------------------------------- λ, the original's ranker


def save_lambda_ranking(model, output_dir, units):
    """lambdas.npy and sorted_heads.json as the original wrote them (units of one head), or ranked by each unit's
    mean λ; and head_scores.csv."""
    lambdas = lambdas_array(model)  # (L, H)
    save_ranking(lambdas, output_dir)
    scores = [float(np.mean([lambdas[layer, head] for layer, head in unit])) for unit in units]
    order = sorted(range(len(units)), key=lambda u: (scores[u], u))
    write_ranking(Scored([units[u] for u in order], [scores[u] for u in order], {}), model, output_dir)


def prepare_lambda_training(trainer, model_args):
    """λ's own learning rate (--lambda_learning_rate: an optimizer group of its own) and the spread of σ(λ) in every
    log (sigma_lambda_min / _max / _std)."""
    model = trainer.model
    if model_args.lambda_learning_rate is not None:
        optimizer = trainer.create_optimizer()
        lambdas = {id(p) for n, p in model.named_parameters() if n.endswith(LAMBDA_NAMES)}
        moved = []
        for group in optimizer.param_groups:
            moved += [p for p in group["params"] if id(p) in lambdas]
            group["params"] = [p for p in group["params"] if id(p) not in lambdas]
        optimizer.add_param_group({"params": moved, "lr": model_args.lambda_learning_rate, "weight_decay": 0.0})
    trainer.add_callback(LambdaSpread(model))


class LambdaSpread(TrainerCallback):
    """Adds the spread of σ(λ) to every log of a ranking run (console, log_history in trainer_state.json)."""

    def __init__(self, model):
        self.model = model

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        sigma = torch.sigmoid(torch.from_numpy(lambdas_array(self.model)).double())
        spread = dict(sigma_lambda_min=float(sigma.min()), sigma_lambda_max=float(sigma.max()),
                      sigma_lambda_std=float(sigma.std()))
        logs.update(spread)
        if state.log_history:  # the Trainer recorded this log before calling back
            state.log_history[-1].update(spread)

    def on_train_end(self, args, state, control, **kwargs):
        sigma = torch.sigmoid(torch.from_numpy(lambdas_array(self.model)).double())
        stage(f"σ(λ) after training: {float(sigma.min()):.4f} to {float(sigma.max()):.4f} (std {float(sigma.std()):.4f};"
              " 0.5 = untrained)")


# ----------------------------------------------------------------------------- the other rankers


def ranking_subset(data, max_samples=None, sample="first", seed=0):
    """The examples a ranker ranks on: all of `data`, its first `max_samples`, or (sample="seeded") `max_samples`
    drawn without replacement by a generator seeded with `seed`, kept in the data's order."""
    if max_samples is None or max_samples >= len(data):
        return data
    if sample == "first":
        return data.select(range(max_samples))
    drawn = np.random.default_rng(seed).choice(len(data), size=max_samples, replace=False)
    return data.select(sorted(drawn.tolist()))


def ranking_batches(trainer, max_samples=None, sample="first"):
    """The ranking data (`ranking_subset` of the training split, drawn with the run's --seed), as the evaluation
    loop batches it, on the model's device."""
    data = ranking_subset(trainer.train_dataset, max_samples, sample, trainer.args.seed)
    loader = trainer.get_eval_dataloader(data)
    batches = [trainer._prepare_inputs(batch) for batch in loader]
    if "needle" in data.column_names:  # a retrieval task's spans, for the retrieval ranker (the loader drops them)
        needles = torch.tensor(data["needle"])
        start = 0
        for batch in batches:
            size = len(batch["input_ids"])
            batch["needle"] = needles[start:start + size].to(batch["input_ids"].device)
            start += size
    return batches


def mixture_batches(trainer, task, model_args, data_args):
    """The ranking data of --ranker_tasks / --ranker_lengths: the first --ranker_max_samples training examples of each
    generated retrieval task at each length (papa.data.retrieval; default 8), one example per batch (each its own
    length), on the model's device."""
    from ..data.retrieval import as_columns, filler_sentences, make_examples

    names = model_args.ranker_tasks or [task.name]
    lengths = model_args.ranker_lengths or [data_args.max_seq_length]
    if task.kind != "lm":
        raise PapaError(f"--ranker_tasks and --ranker_lengths rank a decoder on generated retrieval examples, scored "
                        f"by its LM head; {task.name} trains a probe: use an lm or retrieval --task_name")
    if any(get_task(name).retrieval is None for name in names):
        raise PapaError(f"--ranker_lengths draws examples of a generated retrieval task at each length; {task.name} "
                        "is not one: add --ranker_tasks passkey (or another), or drop --ranker_lengths")
    sentences = filler_sentences(data_args.filler, data_args.data_dir, ["train"])["train"]
    device = trainer.args.device
    batches = []
    for name in names:
        for length in lengths:
            examples = make_examples(get_task(name).retrieval, trainer.processing_class, length,
                                     model_args.ranker_max_samples or MIXTURE_SAMPLES, "train", sentences,
                                     data_args.retrieval_depths or DEPTHS)
            columns = as_columns(examples)
            for i in range(len(examples)):
                batches.append({k: torch.tensor([columns[k][i]], device=device)
                                for k in ("input_ids", "attention_mask", "labels", "needle")})
    return batches


MIXTURE_SAMPLES = 8  # examples of each task at each length when --ranker_max_samples is not given


def rank_heads(trainer, task, model_args, training_args, train_probe, data_args=None):
    """A ranking run with a ranker other than λ: `train_probe()` trains the probe at k = 0 (probe tasks), then the
    ranker scores the heads; writes sorted_heads.json and head_scores.csv. The model stays stock afterwards (every
    gate 0), for the evaluation that follows."""
    model = trainer.model
    set_gates(model, {})  # the stock model: the probe trains (and the run evaluates) at k = 0
    if task.kind != "lm":
        train_probe()
    model.eval()
    mixture = bool(model_args.ranker_tasks or model_args.ranker_lengths)
    if mixture:
        batches = mixture_batches(trainer, task, model_args, data_args)
    else:
        batches = ranking_batches(trainer, model_args.ranker_max_samples, model_args.ranker_sample)
    units = ranking_units(model.config, model_args)
    objective = Objective(model, batches, task.kind, model_args.ranker_loss, scored_only=bool(task.retrieval) or mixture)
    entry = RANKERS[model_args.ranker]
    options = {"reuse_prefix": model_args.loo_prefix_cache}
    if entry.logs_batches:
        options["log"] = lambda done, total: stage(f"{entry.name}: batch {done}/{total} scored")
    if entry.steps:
        steps = model_args.ranker_steps or (training_args.max_steps if training_args.max_steps > 0 else math.ceil(
            training_args.num_train_epochs * len(batches)))
        options.update(steps=steps, learning_rate=model_args.lambda_learning_rate, l1=model_args.gates_l1,
                       log=_gate_logger(steps))
    stage(f"ranking {len(units)} {'K/V groups' if len(units) < sum(len(u) for u in units) else 'heads'} with "
          f"{model_args.ranker} on {objective.num_examples} training examples ({model_args.ranker_loss} loss)")
    progress = NoProgress()
    described = {"ranker": model_args.ranker, "loss": model_args.ranker_loss,
                 **{k: v for k, v in options.items() if k not in ("log", "max_rows")}}
    digest = fingerprint(described, units, batches, model)  # what is ranked: the parts of one ranking share it
    if trainer.is_world_process_zero():  # saved as it goes; a re-run of the same ranking resumes it
        progress = Progress(os.path.join(training_args.output_dir, PROGRESS_FILE), digest)
    if model_args.ranker_parts:  # one part of loo's units, written for the merge
        part = layer_part(units, model_args.ranker_part, model_args.ranker_parts)
        scores = entry.parts(objective, part, dict(options, progress=progress))
        if trainer.is_world_process_zero():
            save_part(training_args.output_dir, part, scores, model_args.ranker_part, model_args.ranker_parts, digest)
            progress.finish()
        set_gates(model, {})
        return None
    if model_args.ranker_merge:
        scored = merged_parts(model_args.ranker_merge, units, digest)
    else:
        scored = rank(model_args.ranker, objective, units, progress=progress, **options)
    set_gates(model, {})
    if trainer.is_world_process_zero():
        write_ranking(scored, model, training_args.output_dir)
        progress.finish()
        stage(f"wrote sorted_heads.json and head_scores.csv to {training_args.output_dir}")
    return scored


# ----------------------------------------------------------------------------- loo in parts (--ranker_parts)

PART_FILE = "ranker_part.pt"
PART_FORMAT = "papa-ranker-part"


def layer_part(units, part, parts):
    """The units of the `part`-th (1-based) of `parts` contiguous ranges of layers: a layer's units stay together,
    so each forward of the part is the one a single process makes (papa.method.scorers.loo_scores groups a layer's
    units), and the merged scores equal its to the bit."""
    layers = sorted({layer for unit in units for layer, _ in unit})
    chosen = {int(layer) for layer in np.array_split(np.array(layers), parts)[part - 1]}
    return [unit for unit in units if unit[0][0] in chosen]


def save_part(output_dir, units, scores, part, parts, digest):
    from ..io import save_tensor

    save_tensor({"format": PART_FORMAT, "part": part, "parts": parts, "ranking": digest,
                 "units": [[list(h) for h in unit] for unit in units], "scores": scores.double()},
                os.path.join(output_dir, PART_FILE))
    stage(f"wrote {PART_FILE} (part {part} of {parts}: {len(units)} units) to {output_dir}")


def merged_parts(folders, units, digest):
    """Scored, as loo ranks: the parts' scores, checked to be parts of this very ranking and to cover every unit
    once, ordered by (score, unit) as papa.method.rankers orders loo's scores."""
    scores = {}
    for folder in folders:
        path = os.path.join(folder, PART_FILE)
        if not os.path.isfile(path):
            raise PapaError(f"{path} does not exist: run that part first (--ranker_part I --ranker_parts N)")
        record = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(record, dict) or record.get("format") != PART_FORMAT:
            raise PapaError(f"{path} is not a loo part ({PART_FILE} of a --ranker_parts run)")
        if record["ranking"] != digest:
            raise PapaError(f"{path} is a part of another ranking (other data, units, loss or constants): redo it "
                            "with this run's flags")
        for unit, score in zip(record["units"], record["scores"].tolist()):
            key = tuple(tuple(h) for h in unit)
            if key in scores:
                raise PapaError(f"{path} scores unit {unit} that another part scored too: give each part once")
            scores[key] = score
    missing = [unit for unit in units if tuple(tuple(h) for h in unit) not in scores]
    if missing:
        raise PapaError(f"the parts in {', '.join(folders)} leave {len(missing)} units unscored (first: {missing[0]}): "
                        "give every part")
    values = [scores[tuple(tuple(h) for h in unit)] for unit in units]
    order = sorted(range(len(units)), key=lambda u: (values[u], u))
    stage(f"merged loo's scores of {len(units)} units from {len(folders)} parts")
    return Scored([units[u] for u in order], [values[u] for u in order], {})


def _single_head_deltas(trainer, task, model_args, batches, names, what):
    """({name: (L, H) loss change on `batches` when the head alone is replaced}, (L, H) pattern variance or None),
    each replacement of `names` loaded in turn into the ranking run's mix-mode model (papa.method.replacements); the
    model holds PAPA's averages and its gates again afterwards."""
    from ..method.replacements import head_replacement_deltas, load_replacement, replacement_pairs

    if not model_args.sort_calculating:
        raise PapaError(f"{what} scores heads in the ranking run: add --sort_calculating True")
    model = trainer.model.eval()
    gates = [module.papa_gate for module in attention_modules(model)]
    pairs = replacement_pairs(model_args.static_heads_dir, names)
    examples = sum(len(batch["input_ids"]) for batch in batches)
    stage(f"{what[2:]}: replacing each head alone by {', '.join(pairs)} on {examples} examples")
    deltas, variance = head_replacement_deltas(model, batches, task.kind, pairs, model_args.ranker_loss,
                                               log=lambda name: stage(f"{what[2:]}: {name} done"))
    load_replacement(model, *replacement_pairs(model_args.static_heads_dir, ("constant",))["constant"])
    for module, gate in zip(attention_modules(model), gates):  # the evaluation's model as the ranking left it
        module.papa_gate = gate
    return deltas, variance


def write_best_of(trainer, task, model_args, training_args):
    """best_of.csv in the output folder (papa.method.best_of): every head's loss change on the ranking data (the
    training split, its first --ranker_max_samples) under constant, mean_output and mean_corrected, and the one
    that loses least, which `--replace_heads_with best_of` runs read."""
    from ..method.best_of import BEST_OF_FILE, CANDIDATES, best_of_csv

    batches = ranking_batches(trainer, model_args.ranker_max_samples, model_args.ranker_sample)
    deltas, _ = _single_head_deltas(trainer, task, model_args, batches, CANDIDATES, "--best_of")
    if trainer.is_world_process_zero():
        save_text(best_of_csv(deltas), os.path.join(training_args.output_dir, BEST_OF_FILE))
        stage(f"wrote {BEST_OF_FILE} to {training_args.output_dir}")
    return deltas


def write_head_replacements(trainer, task, model_args, training_args, dataset):
    """head_replacements.csv and .png in the output folder: every head's loss change on `dataset` (held out) under
    each replacement (papa.method.replacements), with its profile and pattern variance."""
    from ..method.replacements import (REPLACEMENTS, head_replacements_rows, plot_head_replacements,
                                       replacement_pairs, rows_csv)

    if dataset is None and model_args.sort_calculating:
        raise PapaError("--head_replacements needs held-out data: give the task an evaluation split (--do_eval)")
    batches = [] if dataset is None else [trainer._prepare_inputs(b) for b in trainer.get_eval_dataloader(dataset)]
    deltas, variance = _single_head_deltas(trainer, task, model_args, batches, REPLACEMENTS, "--head_replacements")
    rows = head_replacements_rows(deltas, variance, replacement_pairs(model_args.static_heads_dir,
                                                                      ("constant",))["constant"][0])
    if trainer.is_world_process_zero():
        save_text(rows_csv(rows), os.path.join(training_args.output_dir, "head_replacements.csv"))
        plot_head_replacements(rows, os.path.join(training_args.output_dir, "head_replacements.png"))
        stage(f"wrote head_replacements.csv and head_replacements.png to {training_args.output_dir}")
    return rows


def _gate_logger(steps):
    every = max(1, steps // 10)

    def log(step, loss, alpha):
        if step % every == 0 or step == steps - 1:
            stage(f"gates step {step + 1}/{steps}: loss {loss:.4f}, α from {float(alpha.min()):.3f} to "
                  f"{float(alpha.max()):.3f}")
    return log
