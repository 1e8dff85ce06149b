"""The rankers' computations: each scores *units* (a head, or with `kv_groups` the query heads of one K/V group: a
group's K projection and K cache go only when all its heads are constant) on the ranking data, through one model
patched in mix mode with gates (papa.method.gates: g = 0 stock, g = 1 PAPA's constant head). Scores are per-example
means of the loss (papa.method.example_losses: the task's, or distillation against the stock model). Which ranker
uses which, with its defaults: papa.method.rankers, the registry.

    taylor_scores      Σ_x |∂L_x/∂g_u| / N at the stock model (Michel et al. 2019's first-order importance, for
                       PAPA's own intervention: ∂L/∂g_h = ⟨∂L/∂A_h, norm(C_h) − A_h⟩). One forward and backward per
                       batch. The signed mean, the first-order estimate of the loss change, is kept beside it.
    loo_scores         the exact loss change when the unit alone is made constant (leave one out). The blocks below
                       the unit's layer are computed once per batch (PrefixCache) and several units share a forward.
    iterative_ranking  greedy: score the remaining units (loo or taylor) with the units chosen so far constant, take
                       the tenth of all units that cost least, repeat. The ranking is the order of choice.
    train_gates        DuoAttention's training: α_u ∈ [0, 1] (g = 1 − α) from 1 (stock) with an L1 pull toward 0
                       (constant), AdamW; ranked by final α, which below 0 keeps falling with the pull.

Each saves its progress as it goes to a `Progress` (papa.method.ranking_progress) and resumes from it.
"""

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import PapaError
from ..families.lm_head import final_hidden, output_logits, scored_positions
from .example_losses import distill_losses, task_losses
from .gates import RECOMPUTE_FROM, PrefixCache, check_mix_mode, gated, recomputed_blocks
from .ranking_progress import NoProgress

NO_PROGRESS = NoProgress()
ROUNDS = 10  # iterative: one tenth of the units per round


@dataclass(frozen=True)
class Scored:
    """A ranker's result: units in ranked order, each with its score (and the ranker's extra columns)."""

    units: list  # [[(layer, head), ...]] in ranked order
    scores: list  # one float per unit (ascending for loo and taylor; the order of choice for iterative)
    extra: dict  # column -> list of floats or ints, per ranked unit

    def sorted_heads(self):
        """sorted_heads.json's rows: every head in ranked order (a unit's heads together)."""
        return [[layer, head] for unit in self.units for layer, head in unit]


def make_units(num_layers, num_heads, kv_groups=None):
    """[[(layer, head)]]: one head each, or with `kv_groups` (K/V heads per layer) the query heads of each group."""
    if kv_groups is None or kv_groups == num_heads:
        return [[(layer, head)] for layer in range(num_layers) for head in range(num_heads)]
    if num_heads % kv_groups:
        raise PapaError(f"{num_heads} query heads do not split into {kv_groups} K/V groups")
    size = num_heads // kv_groups
    return [[(layer, g * size + i) for i in range(size)] for layer in range(num_layers) for g in range(kv_groups)]


class Objective:
    """The loss of the ranking data under gates: per-example losses of each batch, the stock outputs kept for
    distillation. `batches`: a list of dicts of tensors on the model's device (labels included). `scored_only` (an lm
    task scoring a few positions: the retrieval tasks): the LM head runs on the labelled positions alone, and both
    losses are means over them (papa.families.lm_head), so a long context's logits are never made. `recompute`: the
    differentiating rankers keep each block's input alone and recompute it in the backward pass
    (papa.method.gates.recomputed_blocks); None: from RECOMPUTE_FROM tokens per sequence on. The stock outputs the
    distillation loss compares with are made once, without autograd, as DuoAttention's teacher: every batch's when
    only a few positions are scored (a few rows of logits each), else the last batch's alone ((B, T, V) each)."""

    def __init__(self, model, batches, kind, loss="task", scored_only=False, recompute=None):
        if loss not in ("task", "distill"):
            raise PapaError(f"the ranking loss is 'task' or 'distill'; got {loss!r}")
        self.model, self.batches, self.kind, self.loss = model, batches, kind, loss
        self.scored_only = scored_only and kind == "lm"
        self.layers = check_mix_mode(model)
        self.num_heads = len(self.layers[0].dynamic_heads)
        self.num_examples = sum(len(b["input_ids"]) for b in batches)
        longest = max((b["input_ids"].shape[-1] for b in batches), default=0)
        self.recompute = longest >= RECOMPUTE_FROM if recompute is None else recompute
        self._stock = {}

    @property
    def reference(self):
        """A tensor of the constants (full matrices, or a structured head's profile): the device and dtype of the
        gates."""
        return self.layers[0]._replacements()[0]

    def labels(self, batch):
        return batch.get("labels", batch["input_ids"]) if self.kind == "lm" else batch["labels"]

    def logits(self, batch, copies=1):
        """The model's outputs of `batch` repeated `copies` times: (copies·B, ...) logits, or with `scored_only` the
        (M, V) logits of the scored positions alone, row-major."""
        inputs = self.inputs(batch)
        if copies > 1:
            inputs = {k: v.repeat(copies, *([1] * (v.dim() - 1))) for k, v in inputs.items()}
        if self.scored_only:
            rows, positions, _ = scored_positions(self.labels(batch).repeat(copies, 1))
            return output_logits(self.model, final_hidden(self.model, inputs)[rows, positions])
        return self.model(**inputs).logits

    @staticmethod
    def inputs(batch):
        """The model's inputs of a batch: not its labels, nor a retrieval task's needle spans."""
        return {k: v for k, v in batch.items() if k not in ("labels", "needle")}

    def losses(self, index, logits, copies=1):
        """(copies·B,) losses of batch `index`'s `logits` (its examples repeated `copies` times)."""
        batch = self.batches[index]
        labels = self.labels(batch)
        labels = labels.repeat(copies, *([1] * (labels.dim() - 1)))
        if self.scored_only:
            rows, _, targets = scored_positions(labels)
            if self.loss == "task":
                per_position = F.cross_entropy(logits.float(), targets, reduction="none")
            else:  # KL(stock ‖ model) at each scored position
                stock = self.stock_logits(index).repeat(copies, 1).float().log_softmax(-1)
                per_position = (stock.exp() * (stock - logits.float().log_softmax(-1))).sum(-1)
            sums = per_position.new_zeros(len(labels)).index_add(0, rows, per_position)
            counts = per_position.new_zeros(len(labels)).index_add(0, rows, torch.ones_like(per_position))
            return sums / counts.clamp_min(1)
        if self.loss == "task":
            return task_losses(self.kind, logits, labels)
        stock = self.stock_logits(index)
        stock = stock.repeat(copies, *([1] * (stock.dim() - 1)))
        return distill_losses(self.kind, logits, stock, labels if self.kind == "token" else None)

    def stock_logits(self, index):
        """The stock model's logits of batch `index`: every batch's kept with `scored_only`, else the last batch's
        alone (an lm's are (B, T, V))."""
        if index not in self._stock:
            with torch.no_grad(), gated(self.model, {}):
                logits = self.logits(self.batches[index]).detach()
            if not self.scored_only:
                self._stock = {}
            self._stock[index] = logits
        return self._stock[index]

    def differentiated(self, gates):
        """The context a differentiating ranker runs its forward and backward in: the model under `gates`, its
        blocks recomputed in the backward pass when `recompute` (the backward must run inside it)."""
        return _both(gated(self.model, gates), recomputed_blocks(self.model, self.recompute))

    def gates(self, chosen, rows=None):
        """{layer: (H,) gate} with 1 at the heads of the `chosen` units (each row of (rows, H) when rows given)."""
        out = {}
        for unit in chosen:
            for layer, head in unit:
                gate = out.setdefault(layer, torch.zeros(self.num_heads))
                gate[head] = 1
        ref = self.reference
        return {layer: (g if rows is None else g.expand(rows, -1)).to(ref.device, ref.dtype) for layer, g in out.items()}


@contextmanager
def _both(outer, inner):
    with outer, inner:
        yield


@contextmanager
def frozen(model):
    """The model's trainable parameters frozen inside the block (a ranker differentiates its gates alone)."""
    held = [p for p in model.parameters() if p.requires_grad]
    for p in held:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in held:
            p.requires_grad_(True)


def taylor_scores(objective, units, chosen=(), progress=NO_PROGRESS, scope="first-order sums"):
    """(|first-order| score, signed first-order estimate) per unit: means over the examples of |∂L_x/∂g_u| and of
    ∂L_x/∂g_u, at the model with the `chosen` units constant (the stock model when none). The sums are saved to
    `progress` after each batch (papa.method.ranking_progress) and resumed from it."""
    model = objective.model
    saved = progress.get(scope) or {"batches": 0, "absolute": torch.zeros(len(units), dtype=torch.float64),
                                    "signed": torch.zeros(len(units), dtype=torch.float64)}
    absolute, signed = saved["absolute"].clone(), saved["signed"].clone()
    with frozen(model):
        for index, batch in enumerate(objective.batches):
            if index < saved["batches"]:
                continue
            B = len(batch["input_ids"])
            base = objective.gates(chosen, rows=B)
            ref = objective.reference
            shifts = {l: torch.zeros(B, objective.num_heads, device=ref.device, dtype=ref.dtype, requires_grad=True)
                      for l in sorted({layer for unit in units for layer, _ in unit})}
            gates = dict(base)
            for layer, shift in shifts.items():
                gates[layer] = (base[layer] if layer in base else 0) + shift
            with objective.differentiated(gates):
                losses = objective.losses(index, objective.logits(batch))
                losses.sum().backward()
            for u, unit in enumerate(units):
                per_example = sum(shifts[layer].grad[:, head] for layer, head in unit).double()  # (B,)
                absolute[u] += per_example.abs().sum().cpu()
                signed[u] += per_example.sum().cpu()
            progress.save(scope, {"batches": index + 1, "absolute": absolute.clone(), "signed": signed.clone()})
    return absolute / objective.num_examples, signed / objective.num_examples


OUTPUT_BYTES = 1 << 30  # the float32 outputs (logits) one loo forward may make: a 262k-token LM head's are large


FORWARD_TOKENS = 1 << 16  # tokens one loo forward may carry: at T = 8 192, 8 sequences


def output_width(objective):
    """The width of a ranking model's outputs per position: the vocabulary for lm (the LM head's logits), 1 where
    only a few positions are scored (`scored_only`)."""
    if objective.kind != "lm" or objective.scored_only:
        return 1
    return getattr(objective.model.config, "vocab_size", None) or 1


def copies_per_forward(batch_size, seq_len, width, max_rows=64):
    """How many copies of a batch one loo forward carries: at most `max_rows` sequences, at most FORWARD_TOKENS
    tokens, and at most OUTPUT_BYTES of float32 outputs (seq_len × width per sequence; Gemma-3's logits alone are
    134 MB per sequence of 128), but always one."""
    rows = min(max_rows, FORWARD_TOKENS // seq_len, OUTPUT_BYTES // (4 * seq_len * width))
    return max(1, rows // batch_size)


@torch.no_grad()
def loo_scores(objective, units, chosen=(), reuse_prefix=True, max_rows=64, log=None, progress=NO_PROGRESS,
               scope="loss changes"):
    """The mean loss change per unit when it is made constant beside the `chosen` units (exact, no
    approximation). `reuse_prefix`: the blocks below a unit's layer are computed once per batch; `max_rows`: at
    most this many sequences (copies × batch) in one forward; `log(batches done, batches)` after each batch. The
    sums are saved to `progress` after each layer's units of a batch and resumed from there: a ranking of one batch
    (a long context's) resumes inside it, its batch's unchanged losses computed again."""
    model = objective.model
    saved = progress.get(scope) or {"batches": 0, "deltas": torch.zeros(len(units), dtype=torch.float64)}
    deltas = saved["deltas"].clone()
    by_layer = {}
    for u, unit in enumerate(units):
        layers = {layer for layer, _ in unit}
        if len(layers) != 1:
            raise PapaError("a ranking unit's heads must share one layer")
        by_layer.setdefault(layers.pop(), []).append(u)
    cache = PrefixCache(model) if reuse_prefix else None
    for index, batch in enumerate(objective.batches):
        if index < saved["batches"]:
            continue
        layers_done = saved.get("layers", 0) if index == saved["batches"] else 0  # of this batch, before a stop
        B = len(batch["input_ids"])
        with gated(model, objective.gates(chosen)):
            if cache is None:
                base = objective.losses(index, objective.logits(batch))
            else:
                with cache.record(B):
                    base = objective.losses(index, objective.logits(batch))
        base = base.double()
        per_forward = copies_per_forward(B, batch["input_ids"].shape[1], output_width(objective), max_rows)
        for position, (layer, members) in enumerate(sorted(by_layer.items())):
            if position < layers_done:
                continue
            for start in range(0, len(members), per_forward):
                group = members[start:start + per_forward]
                copies = len(group)
                gates = objective.gates(chosen, rows=copies * B)
                row = gates.get(layer)
                row = row.clone() if row is not None else torch.zeros(
                    copies * B, objective.num_heads, dtype=base.dtype).to(objective.reference)
                for c, u in enumerate(group):
                    for _, head in units[u]:
                        row[c * B:(c + 1) * B, head] = 1
                gates[layer] = row
                with gated(model, gates):
                    if cache is None:
                        losses = objective.losses(index, objective.logits(batch, copies), copies)
                    else:
                        with cache.replay_below(layer, copies):
                            losses = objective.losses(index, objective.logits(batch, copies), copies)
                losses = losses.double().view(copies, B)
                for c, u in enumerate(group):
                    deltas[u] += (losses[c] - base).sum().cpu()
            progress.save(scope, {"batches": index, "layers": position + 1, "deltas": deltas.clone()})
        progress.save(scope, {"batches": index + 1, "layers": 0, "deltas": deltas.clone()})
        if log is not None:
            log(index + 1, len(objective.batches))
    return deltas / objective.num_examples


def iterative_ranking(objective, units, exact=True, progress=NO_PROGRESS, **loo_options):
    """Greedy: each round scores the units not yet chosen with the chosen ones constant and takes the
    ceil(units / 10) that cost least (`exact`: by loo; else by taylor's |first-order| score). Returns Scored, the
    scores being each unit's when it was chosen, with the round in `extra`. Each finished round is saved to
    `progress` (and its scorer's batches within it) and resumed from it."""
    per_round = math.ceil(len(units) / ROUNDS)
    saved = progress.get("rounds") or {"chosen": [], "scores": [], "rounds": []}
    chosen, scores, rounds = list(saved["chosen"]), list(saved["scores"]), list(saved["rounds"])
    taken = set(chosen)
    remaining = [u for u in range(len(units)) if u not in taken]
    round_index = rounds[-1] + 1 if rounds else 0
    while remaining:
        candidates = [units[u] for u in remaining]
        scope = f"round {round_index}"
        if exact:
            values = loo_scores(objective, candidates, [units[u] for u in chosen], progress=progress, scope=scope,
                                **loo_options)
        else:
            values = taylor_scores(objective, candidates, [units[u] for u in chosen], progress, scope)[0]
        order = sorted(range(len(remaining)), key=lambda i: (float(values[i]), remaining[i]))[:per_round]
        for i in order:
            chosen.append(remaining[i])
            scores.append(float(values[i]))
            rounds.append(round_index)
        taken = {remaining[i] for i in order}
        remaining = [u for u in remaining if u not in taken]
        progress.save("rounds", {"chosen": list(chosen), "scores": list(scores), "rounds": list(rounds)}, force=True)
        round_index += 1
    return Scored([units[u] for u in chosen], scores, {"round": rounds})


def train_gates(objective, units, steps, learning_rate=0.02, l1=0.05, log=None, progress=NO_PROGRESS):
    """DuoAttention's gate training: α per unit from 1, loss = mean ranking loss + l1 · mean(α), AdamW (no weight
    decay), `steps` steps cycling through the batches; the forward reads α clamped to [0, 1]. Returns α (units,).
    α and the optimiser's state are saved to `progress` as it trains and resumed from it."""
    model = objective.model
    ref = objective.reference
    alpha = torch.ones(len(units), dtype=torch.float32, device=ref.device, requires_grad=True)
    optimizer = torch.optim.AdamW([alpha], lr=learning_rate, weight_decay=0.0)
    saved = progress.get("gate training") or {"step": 0}
    if saved["step"]:
        with torch.no_grad():
            alpha.copy_(saved["alpha"].to(alpha.device))
        optimizer.load_state_dict(saved["optimizer"])
    owner = {}  # layer -> (H,) index of each head's unit in α
    for u, unit in enumerate(units):
        for layer, head in unit:
            owner.setdefault(layer, torch.zeros(objective.num_heads, dtype=torch.long, device=ref.device))[head] = u
    with frozen(model):
        for step in range(saved["step"], steps):
            index = step % len(objective.batches)
            shares = 1 - alpha.clamp(0, 1).to(ref.dtype)
            gates = {layer: shares[heads] for layer, heads in owner.items()}
            optimizer.zero_grad()
            with objective.differentiated(gates):
                loss = objective.losses(index, objective.logits(objective.batches[index])).mean()
                total = loss + l1 * alpha.mean()
                total.backward()
            optimizer.step()
            progress.save("gate training", {"step": step + 1, "alpha": alpha.detach().cpu().clone(),
                                    "optimizer": copy.deepcopy(optimizer.state_dict())})
            if log is not None:
                log(step, float(loss.detach()), alpha.detach())
    return alpha.detach().cpu()
