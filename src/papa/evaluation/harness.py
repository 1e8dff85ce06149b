"""lm-eval's model type `papa`: HFLM around a PAPA-patched causal LM (lm-eval 0.4.13).

    papa-lm-eval --model papa --model_args pretrained=smollm2,static_heads_dir=DIR,sorting_heads_dir=DIR,static_heads_num=68 \
        --tasks papa_sst2 --metadata '{"data_dir": "../shared/data"}' --device cpu

(`papa-lm-eval` is lm-eval's own command with this module imported first, so that the name `papa` is registered,
and the project's task folder on --include_path: papa.cli.lm_eval.) From Python: `PapaLM(pretrained=...)` with
the same arguments, or `PapaLM(pretrained=patched_model, tokenizer=tok)` for a model patched in memory.

Everything is HFLM's (tokenisation, batching, the log-likelihood bookkeeping, metrics) except the two calls
that meet the position-indexed constants (papa.evaluation.patched_lm):
- `_model_call`: each right-padded batch padded on to T;
- `_model_generate`: greedy decoding from the unpadded prompts (lm-eval pads them on the left), without a cache.
The context window (`max_length`) is T, so lm-eval cuts a longer request to its last T tokens, as it does for
any model (with a warning); the continuation is always kept. A model with no replaced head (k = 0) runs as HFLM
runs it, with the same window, so every k sees the same cut requests.
"""

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from ..errors import PapaError
from .patched_lm import aligned_logits, greedy_generate, load_patched_lm, replaced_seq_len, strip_left_padding


@register_model("papa")
class PapaLM(HFLM):
    """HFLM for a PAPA model. `pretrained`: a model name/folder/.gguf (then `static_heads_dir`,
    `sorting_heads_dir` and `static_heads_num` say which heads are constant), or a patched causal LM in memory
    (with its `tokenizer`). Other keyword arguments are HFLM's (batch_size, device, dtype, ...)."""

    def __init__(self, pretrained, static_heads_dir=None, sorting_heads_dir=None, static_heads_num=0,
                 max_length=None, tokenizer=None, device="cpu", **kwargs):
        if isinstance(pretrained, str):
            if tokenizer is not None:
                raise PapaError("the papa model type uses the model's own tokenizer: leave tokenizer out")
            pretrained, tokenizer, max_length = load_patched_lm(pretrained, static_heads_dir, sorting_heads_dir,
                                                                static_heads_num, max_length)
            dtype = kwargs.pop("dtype", None)
            if dtype not in (None, "auto"):  # HFLM casts only the models it loads itself
                pretrained.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
        elif tokenizer is None:
            raise PapaError("PapaLM(pretrained=<model in memory>) needs its tokenizer too (tokenizer=...)")
        else:
            tokenizer.padding_side = "right"
            seq_len = replaced_seq_len(pretrained)
            if seq_len is not None and max_length is not None and int(max_length) != seq_len:
                raise PapaError(f"max_length={max_length}, but the model's constants are {seq_len}x{seq_len}: its "
                                f"context window is their T; leave max_length out (or give {seq_len})")
            max_length = seq_len or max_length
        device = device if device and (not str(device).startswith("cuda") or torch.cuda.is_available()) else "cpu"
        pretrained.to(device).eval()
        super().__init__(pretrained=pretrained, tokenizer=tokenizer, max_length=max_length, **kwargs)
        self.papa_seq_len = replaced_seq_len(pretrained)  # None: no replaced head, HFLM's own calls

    def _model_call(self, inps, attn_mask=None, labels=None):
        if self.papa_seq_len is None:
            return super()._model_call(inps, attn_mask, labels)
        with torch.no_grad(), torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                                             enabled=self.mixed_precision_dtype is not None):
            return aligned_logits(self.model, inps, self.papa_seq_len, self.tokenizer.pad_token_id)

    def _model_generate(self, context, max_length, stop, **generation_kwargs):
        if self.papa_seq_len is None:
            return super()._model_generate(context, max_length, stop, **generation_kwargs)
        if generation_kwargs.get("do_sample"):
            raise PapaError("the papa model type generates greedily (do_sample=False): sampling is not supported")
        mask = generation_kwargs.get("attention_mask")
        rows = strip_left_padding(context, torch.ones_like(context) if mask is None else mask)
        stops = [s for s in stop or [] if s]

        def stopped(_, new):
            return new[-1] == self.tokenizer.eos_token_id or any(s in self.tok_decode(new) for s in stops)

        new = greedy_generate(self.model, rows, self.papa_seq_len, self.tokenizer.pad_token_id,
                              max_length - context.shape[1], stopped)
        width = max(map(len, new), default=0)
        out = context.new_full((context.shape[0], context.shape[1] + width), self.tokenizer.pad_token_id)
        out[:, :context.shape[1]] = context  # as HF's generate returns it: the prompt as given, then the new tokens
        for b, tokens in enumerate(new):
            out[b, context.shape[1]:context.shape[1] + len(tokens)] = torch.tensor(tokens, dtype=out.dtype)
        return out
