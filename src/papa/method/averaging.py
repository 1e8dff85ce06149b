"""Average attention per head over a training set: the constant matrices of PAPA.

For every batch with padding mask m, P[b, i, j] = m_i · m_j and

    sums[l, h, i, j] += Σ_b A[b, l, h, i, j] · P[b, i, j]
    patterns[i, j]   += Σ_b P[b, i, j]
    avgs             = sums / patterns   (0 where patterns is 0)

exactly the original's `attention_sums.pt`, `attention_patterns_sums.pt` and `avgs.pt`. Optionally
(the mean-ablation control) also each head's mean output, its context vector A·V per position:

    output_sums[l, h, i] += Σ_b m_i · (A V)[b, l, h, i]      mean_outputs = output_sums / Σ_b m_i

and (the mean_corrected replacement) each head's mean value per position and the output correction

    value_sums[l, h, j]  += Σ_b m_j · V[b, l, h, j]          mean_values = value_sums / Σ_b m_j
    output_corrections   = mean_outputs − avgs · mean_values   E[A V] − Ā·E[V], per query position

(zero where pattern and values are uncorrelated), the values read through a PAPA-patched model (any family).

The statistics are accumulated *inside* the forward, by hooks on each layer's attention module
(and on the projection that reads the heads' outputs), so no layer's probabilities outlive that
layer and peak memory does not grow with the number of layers; HF is never asked to collect
`output_attentions`. Once the last layer's statistics are in, the forward stops: the rest of
that layer (its A·V, output projection and feed-forward block) and the pooler feed nothing the
averages use (most of one of MiniLM's six layers). An encoder's sums live in float64 so hundreds of
thousands of examples lose nothing; a decoder's (`lower_triangle`, papa.method.layouts) hold the lower triangle
only, in float32 by default, so averaging at T = 2048 holds one copy of the stored averages' size.
Across processes (torchrun / accelerate), every process sees a disjoint shard of the examples
(no sampler padding, so nothing is counted twice) and the sums are all-reduced.
"""

import os
from contextlib import contextmanager

import torch
import torch.distributed as dist

from .attention import dynamic_copy, head_dim
from ..families.constant_math import padding_pattern
from ..families import PapaAttention, accepts_token_type_ids, attention_modules, family_for
from ..errors import PapaError
from ..io import load_json_object, save_json, save_tensor
from .layouts import pack, packed_record, triangle_size, unpack


class AttentionAverager:
    """Streaming sums of pattern-masked attention probabilities (and, optionally, head outputs).

    lower_triangle (decoders): the sums, and the files, hold each matrix's lower triangle only (papa.method.layouts,
    layout 2), as a causal head never attends above the diagonal. sum_dtype: float64 (the default for full
    matrices), or float32 (the default for lower triangles: the sums then take the bytes of the stored averages,
    not twice them; each batch is summed in float32 first, so a sum's rounding grows with the number of batches,
    not examples: docs/long_context.md measures it against float64 sums).
    """

    def __init__(self, num_layers, num_heads, seq_len, device="cpu", head_dim=None, lower_triangle=False,
                 sum_dtype=None, value_means=False):
        self.seq_len, self.lower_triangle = seq_len, bool(lower_triangle)
        sum_dtype = sum_dtype or (torch.float32 if lower_triangle else torch.float64)
        per_head = (triangle_size(seq_len),) if lower_triangle else (seq_len, seq_len)
        self.attention_sums = torch.zeros(num_layers, num_heads, *per_head, dtype=sum_dtype, device=device)
        self.pattern_sums = torch.zeros(seq_len, seq_len, dtype=torch.float64, device=device)
        self.output_sums = self.value_sums = None
        if head_dim is not None:
            self.output_sums = torch.zeros(num_layers, num_heads, seq_len, head_dim, dtype=torch.float64, device=device)
            if value_means:
                self.value_sums = torch.zeros_like(self.output_sums)
        self.num_examples = 0
        self._saved_averages = None  # after save() of float32 lower triangles: the sums, divided in place

    @torch.no_grad()
    def add_batch(self, attention_mask):
        """Count a batch's padding pattern; attention_mask: (B, T) with 1 for real tokens."""
        valid = attention_mask.to(self.pattern_sums.device, torch.float32)
        self.pattern_sums += (valid[:, :, None] * valid[:, None, :]).sum(0, dtype=torch.float64)
        self.num_examples += attention_mask.shape[0]

    @torch.no_grad()
    def add_attention(self, layer, probs, valid):
        """probs: (B, H, T, T) of one layer; valid: (B, T) float."""
        self._check_not_saved()
        # summed over the batch in float32 at least (float16 / bfloat16 probabilities under autocast), then added
        summed = (probs * padding_pattern(valid.to(probs.dtype))).sum(0, dtype=torch.float32)
        if self.lower_triangle:
            summed = pack(summed)
        self.attention_sums[layer] += summed.to(self.attention_sums.dtype)

    @torch.no_grad()
    def add_outputs(self, layer, context, valid):
        """context: (B, T, H, d) head outputs of one layer; valid: (B, T) float."""
        masked = (context * valid.to(context.dtype)[:, :, None, None]).sum(0, dtype=torch.float32)  # (T, H, d)
        self.output_sums[layer] += masked.transpose(0, 1).double()

    @torch.no_grad()
    def add_values(self, layer, values, valid):
        """values: (B, T, H, d) of one layer, every query head's (grouped key/value heads repeated); valid: (B, T)."""
        masked = (values * valid.to(values.dtype)[:, :, None, None]).sum(0, dtype=torch.float32)  # (T, H, d)
        self.value_sums[layer] += masked.transpose(0, 1).double()

    def update(self, attentions, attention_mask):
        """All layers at once: attentions are L tensors (B, H, T, T); attention_mask: (B, T)."""
        self.add_batch(attention_mask)
        valid = attention_mask.float()
        for layer, probs in enumerate(attentions):
            self.add_attention(layer, probs, valid)

    def all_reduce(self):
        """Sum the statistics of every process (no-op without torch.distributed)."""
        self._check_not_saved()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            for tensor in (self.attention_sums, self.pattern_sums, self.output_sums, self.value_sums):
                if tensor is not None:
                    dist.all_reduce(tensor)
            count = torch.tensor([self.num_examples], dtype=torch.float64, device=self.pattern_sums.device)
            dist.all_reduce(count)
            self.num_examples = int(count.item())
        return self

    def stored_averages(self, out=None):
        """The averages as `avgs.pt` stores them, float32: [L, H, T, T], or [L, H, T(T+1)/2] for lower triangles;
        positions never seen together are 0, not NaN. Divided a layer at a time (into `out`, which may be the
        float32 sums themselves)."""
        if self._saved_averages is not None:
            return self._saved_averages
        counts = pack(self.pattern_sums) if self.lower_triangle else self.pattern_sums
        result = out if out is not None else torch.empty_like(self.attention_sums, dtype=torch.float32)
        for layer in range(self.attention_sums.shape[0]):
            result[layer] = _safe_divide(self.attention_sums[layer].double(), counts).float()
        return result

    def averages(self):
        """avgs [L, H, T, T] in float32 (lower triangles unpacked); positions never seen together are 0, not NaN."""
        stored = self.stored_averages()
        return unpack(stored, self.seq_len) if self.lower_triangle else stored

    def full_sums(self):
        """The attention sums as [L, H, T, T] (lower triangles unpacked), in their dtype."""
        self._check_not_saved()
        return unpack(self.attention_sums, self.seq_len) if self.lower_triangle else self.attention_sums

    def mean_outputs(self):
        """mean head outputs [L, H, T, d] in float32; positions never seen are 0."""
        if self.output_sums is None:
            raise PapaError("mean head outputs were not recorded (accumulate_attention(..., mean_outputs=True))")
        counts = self.pattern_sums.diagonal()[:, None]  # (T, 1): Σ_b m_i
        return _safe_divide(self.output_sums, counts).float()

    def mean_values(self):
        """mean values [L, H, T, d] in float32; positions never seen are 0."""
        return _safe_divide(self.value_sums, self.pattern_sums.diagonal()[:, None]).float()

    def output_corrections(self):
        """E[A V] − Ā·E[V] [L, H, T, d] in float32, from the stored (float32) averages, in float64."""
        values = _safe_divide(self.value_sums, self.pattern_sums.diagonal()[:, None])  # (L, H, T, d)
        outputs = _safe_divide(self.output_sums, self.pattern_sums.diagonal()[:, None])
        stored, result = self.stored_averages(), torch.empty_like(values, dtype=torch.float32)
        for layer in range(values.shape[0]):
            averages = unpack(stored[layer], self.seq_len) if self.lower_triangle else stored[layer]  # (H, T, T)
            result[layer] = (outputs[layer] - averages.double() @ values[layer]).float()
        return result

    def _check_not_saved(self):
        if self._saved_averages is not None:
            raise PapaError("this averager was saved, and its float32 sums became the averages: accumulate into a "
                            "new AttentionAverager")

    def _stored(self, values):
        return packed_record(values.cpu(), self.seq_len) if self.lower_triangle else values.cpu()

    def save(self, output_dir, info=None):
        """Write the three original files (float32; lower triangles in layout 2), and mean_outputs.pt when
        recorded, each atomically; then `info` (what they were averaged over: `averages_info`) as avgs_info.json.
        An older avgs_info.json goes first, so a run stopped midway leaves averages of unknown origin, never a
        record of another run's. float32 lower-triangle sums are divided in place into the averages once written
        (no second copy of their size): the averager takes no more batches after that."""
        os.makedirs(output_dir, exist_ok=True)
        info_path = os.path.join(output_dir, AVERAGES_INFO)
        if os.path.exists(info_path):
            os.remove(info_path)
        if self._saved_averages is None:
            sums = self.attention_sums if self.attention_sums.dtype == torch.float32 else self.attention_sums.float()
            save_tensor(self._stored(sums), os.path.join(output_dir, "attention_sums.pt"))
            del sums
        save_tensor(self.pattern_sums.float().cpu(), os.path.join(output_dir, "attention_patterns_sums.pt"))
        in_place = self.lower_triangle and self.attention_sums.dtype == torch.float32
        averages = self.stored_averages(out=self.attention_sums if in_place else None)
        if in_place:
            self._saved_averages = averages
        save_tensor(self._stored(averages), os.path.join(output_dir, "avgs.pt"))
        if self.output_sums is not None:
            save_tensor(self.mean_outputs().cpu(), os.path.join(output_dir, "mean_outputs.pt"))
        if self.value_sums is not None:
            save_tensor(self.mean_values().cpu(), os.path.join(output_dir, "mean_values.pt"))
            save_tensor(self.output_corrections().cpu(), os.path.join(output_dir, "output_corrections.pt"))
        if info is not None:
            save_json(info, info_path, indent=2)


# ----------------------------------------------------------------------------- where averages came from

AVERAGES_INFO = "avgs_info.json"  # beside avgs.pt: the task and model it was averaged over


def averages_info(task_name, model, seq_len, num_examples):
    """What avgs_info.json records: `model` is the path or hub id the averaging script loaded."""
    return {"task": task_name, "model": model, "max_length": seq_len, "num_examples": num_examples}


def _same_model(a, b):
    if a == b:
        return True
    return os.path.isdir(a) and os.path.isdir(b) and os.path.samefile(a, b)


def averages_origin_notes(folder, task_name, model):
    """Sentences saying how the averages in `folder` differ from this run's task and model; [] when they match,
    or when the folder records nothing (averages of the original code, or written before avgs_info.json)."""
    path = os.path.join(folder, AVERAGES_INFO)
    if not os.path.exists(path):
        return []
    info = load_json_object(path, f"delete it, or run the averaging script again into {folder}")
    notes = []
    if info.get("task") not in (None, task_name):
        notes.append(f"the averages in {folder} are {info['task']}'s, but this run is {task_name}: PAPA uses each "
                     f"task's own training-set averages (run the averaging script on {task_name}, unless this "
                     f"cross-task run is what you want)")
    if info.get("model") is not None and model is not None and not _same_model(info["model"], model):
        notes.append(f"the averages in {folder} were taken with {info['model']}, but this run loads {model}")
    return notes


class _LastLayerRecorded(Exception):
    """Raised by the recording hooks when the last layer's statistics are in: ends the forward."""


def _safe_divide(sums, counts):
    seen = counts > 0
    return torch.where(seen, sums / torch.where(seen, counts, torch.ones_like(counts)), torch.zeros_like(sums))


def distributed_context():
    """(rank, world_size, device) under torchrun / `accelerate launch`, or (0, 1, device) alone.

    Initialises the process group from the launcher's environment (gloo on CPU, nccl on GPU).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, world_size, device


def shard(num_examples, rank, world_size):
    """This process's example indices: every example in exactly one shard."""
    return list(range(rank, num_examples, world_size))


@contextmanager
def recording(encoder, averager, valid_of_batch, mean_outputs, value_means=False):
    """Hooks that hand each layer's probabilities (and head outputs) to `averager` as the forward runs.

    Stock modules return their probabilities under eager attention (DeBERTa only when asked, so
    its flag is set per call); sdpa models are switched to eager for the duration. Patched
    modules are told to return theirs. The hook that records the last layer's last statistic
    raises `_LastLayerRecorded` (the caller ends the forward there). Everything is restored on exit.
    """
    family = family_for(encoder)
    modules = attention_modules(encoder)
    handles, patched = [], [m for m in modules if isinstance(m, PapaAttention)]
    implementation = getattr(encoder.config, "_attn_implementation", None)
    switch = not patched and implementation not in (None, "eager")
    if switch:
        encoder.set_attn_implementation("eager")

    last_layer = len(modules) - 1
    last_needs = {"attention"} | ({"outputs"} if mean_outputs else set()) | ({"values"} if value_means else set())
    last_recorded = set()

    def recorded(layer, statistic):
        if layer == last_layer:
            last_recorded.add(statistic)
            if last_recorded == last_needs:  # every hook fires once per forward, in a family-specific order
                last_recorded.clear()
                raise _LastLayerRecorded

    def ask_for_probs(module, args, kwargs):  # DeBERTa: forward(hidden, mask, output_attentions, ...)
        if "output_attentions" in kwargs or len(args) < 3:
            kwargs["output_attentions"] = True
        else:
            args = args[:2] + (True,) + args[3:]
        return args, kwargs

    def attention_hook(layer):
        def hook(module, args, output):
            probs = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if probs is None:
                raise PapaError(f"layer {layer} returned no attention probabilities: load the model with "
                                "attn_implementation='eager'")
            averager.add_attention(layer, probs, valid_of_batch())
            recorded(layer, "attention")
        return hook

    def output_hook(layer, num_heads):
        def hook(module, args):
            context = args[0]  # (B, T, H·d): the heads' outputs, concatenated in the layer's head layout
            by_head = context.view(*context.shape[:2], num_heads, -1)  # (B, T, H, d)
            if isinstance(modules[layer], PapaAttention):
                by_head = modules[layer].papa_stock_order(by_head, dim=2)
            averager.add_outputs(layer, by_head, valid_of_batch())
            recorded(layer, "outputs")
        return hook

    def value_hook(layer):
        def hook(values):
            averager.add_values(layer, values, valid_of_batch())
            recorded(layer, "values")
        return hook

    if value_means and len(patched) != len(modules):
        raise PapaError("mean values are read from a PAPA-patched model: patch it (no head replaced) first")
    try:
        for module in patched:
            module.papa_return_probs = True
        for layer, module in enumerate(patched if value_means else []):
            module.papa_value_hook = value_hook(layer)
        for layer, module in enumerate(modules):
            if family.probs_need_flag and not isinstance(module, PapaAttention):
                handles.append(module.register_forward_pre_hook(ask_for_probs, with_kwargs=True))
            handles.append(module.register_forward_hook(attention_hook(layer)))
        if mean_outputs:
            for layer, projection in enumerate(family.output_projections(encoder)):
                handles.append(projection.register_forward_pre_hook(output_hook(layer, encoder.config.num_attention_heads)))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module in patched:
            module.papa_return_probs = False
            module.papa_value_hook = None
        if switch:
            encoder.set_attn_implementation(implementation)


@torch.no_grad()
def accumulate_attention(model, batches, seq_len, device="cpu", progress=None, mean_outputs=False,
                         autocast_dtype=None, lower_triangle=None, sum_dtype=None, value_means=False, averager=None):
    """Run `model` (any supported family, encoder or decoder, stock or PAPA-patched) over `batches` in eval mode and
    average its attention (and, with `mean_outputs`, its heads' outputs).

    batches yield dicts with input_ids, attention_mask (and token_type_ids); every batch must be
    padded to `seq_len`. autocast_dtype: torch.float16 / torch.bfloat16 runs the forward under
    autocast (the sums keep their dtype). lower_triangle: sum (and save) lower triangles only; None: for
    decoders. sum_dtype: see `AttentionAverager`. value_means: also each head's mean values, and (with the mean
    outputs, recorded too) the output corrections of the mean_corrected replacement; a stock model is read through a
    patched copy (no head replaced: the same attention). averager: one to fill instead of a new `AttentionAverager`
    (a decoder's `papa.method.structured_averaging.StructuredAverager`). Returns the averager with this process's
    sums (call `all_reduce()` for the global ones).
    """
    config = model.config
    mean_outputs = mean_outputs or value_means
    if value_means and not all(isinstance(m, PapaAttention) for m in attention_modules(model)):
        model = dynamic_copy(model, seq_len)
    encoder = model.base_model.eval()
    if lower_triangle is None:
        lower_triangle = family_for(encoder).causal
    if averager is None:
        averager = AttentionAverager(config.num_hidden_layers, config.num_attention_heads, seq_len, device,
                                     head_dim(config) if mean_outputs else None, lower_triangle, sum_dtype, value_means)
    takes_token_types = accepts_token_type_ids(encoder)
    current = {}
    with recording(encoder, averager, lambda: current["valid"], mean_outputs, value_means):
        for batch in batches:
            keys = ("input_ids", "attention_mask") + (("token_type_ids",) if takes_token_types else ())
            inputs = {k: batch[k].to(device) for k in keys if k in batch}
            if inputs["input_ids"].shape[1] != seq_len:
                raise ValueError(f"batch has length {inputs['input_ids'].shape[1]}, expected padding to {seq_len}")
            averager.add_batch(inputs["attention_mask"])
            current["valid"] = inputs["attention_mask"].float()
            try:
                with torch.autocast(torch.device(device).type, dtype=autocast_dtype or torch.float32,
                                    enabled=autocast_dtype is not None):
                    encoder(**inputs, return_dict=True)
            except _LastLayerRecorded:
                pass  # the forward ended after the last statistic it feeds
            except RuntimeError as err:
                if autocast_dtype is None:
                    raise
                raise PapaError(f"the {config.model_type} forward failed under {autocast_dtype} autocast ({err}); "
                                "stock DeBERTa v1 does on CPU: use --mixed_precision no") from None
            if progress is not None:
                progress.update(1)
    return averager
