"""One prefill of a context for every press (kvpress's environment): the stock model's prefill, recorded, then each
press's compression replayed on a copy of its cache.

A kvpress press compresses in a forward hook on each attention layer, after the layer's attention has run over the
whole context; the hidden states that flow on are the stock model's, so every press's prefill computes exactly the
stock prefill plus its own hooks. Recording what each hook receives (the layer's keyword arguments and the second
item of its output) once per prompt, and calling each press's `forward_hook` on those with a copy of the stock cache,
gives the cache that press would have made, without 28 full prefills per prompt: at 8 192 tokens on 2 cores that is
the difference between hours and minutes. Checked against the context-manager path in
findings/kvpress_side_by_side/README.md (same keys found and bytes on every prompt and press at 2 048 tokens).
A press's prefill seconds are then the stock prefill's plus its own hooks'.
"""

import copy
import time

from measure import prefill


class RecordedPrefill:
    """The stock model's prefill of `context` into a fresh cache, with what each attention layer's hook would see."""

    def __init__(self, model, context, new_cache):
        self.model, self.calls = model, []
        layers = model.model.layers
        hooks = [layer.self_attn.register_forward_hook(self._record, with_kwargs=True) for layer in layers]
        try:
            self.cache = new_cache()
            self.seconds = prefill(model, self.cache, context)
        finally:
            for hook in hooks:
                hook.remove()

    def _record(self, module, args, kwargs, output):
        # the cache is swapped for each press's copy; the attention output itself is never read by a hook
        kept = {key: value for key, value in kwargs.items() if key != "past_key_values"}
        self.calls.append((module, kept, (None, *output[1:])))

    def cache_for(self, press):
        """(a copy of the stock cache as `press` would have left it, the press's own seconds); None: stock's copy."""
        start = time.perf_counter()
        cache = copy.deepcopy(self.cache)
        if press is not None:
            press.post_init_from_model(self.model)
        for module, kwargs, output in self.calls:
            module.masked_key_indices = None  # what kvpress's attention patch does in every prefill
            if press is not None:
                module.rotary_emb = self.model.model.rotary_emb  # what the press's context manager sets
                press.forward_hook(module, [], {**kwargs, "past_key_values": cache}, output)
        return cache, time.perf_counter() - start
