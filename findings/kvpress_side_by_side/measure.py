"""What both sides of the comparison measure, the same way: greedy decoding on a prefilled cache, the cache's bytes,
and the process's peak memory during a step. Imports neither papa nor kvpress: the press side runs in kvpress's own
environment (transformers 5.2), the PAPA side in the project's (transformers 5.24)."""

import ctypes
import inspect
import threading
import time

import torch


def cache_keyword(model):
    """The forward's name for the cache: `cache` in transformers ≥ 5.3, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def give_back_freed_memory():
    """glibc's malloc_trim: memory freed by earlier steps goes back to the system, so that the next step's peak is its
    own and not the high-water mark of the process (where there is no glibc, nothing)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


class PeakRss:
    """How far the resident set grows while the block runs (`growth`, bytes): freed memory given back first, then
    sampled every 2 ms by a thread (a context manager)."""

    def __enter__(self):
        give_back_freed_memory()
        self.start = self.peak = rss_bytes()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, rss_bytes())
        self.growth = self.peak - self.start


def tensor_bytes(value):
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def greedy(model, cache, question, steps, start):
    """The question over the prefilled `cache`, then `steps` greedy tokens. Returns (the tokens, seconds per decoded
    token): the first token comes from the question's last forward, each later one from a single-token forward, which
    is what the decode time measures.

    Positions count from `start`, the context's length before any compression, as kvpress's own pipeline passes them:
    a press that drops tokens leaves a shorter cache, and positions taken from its length would shift the question's
    rotary phases against the keys it kept. The question goes in one token at a time: a press with per-layer budgets
    (PyramidKV) leaves layers of different lengths, and transformers sizes a multi-token forward's mask from layer 0's
    (kvpress's pipeline fails there); token by token needs no mask, and causal attention gives the same result."""
    keyword = cache_keyword(model)

    def step(token, position):
        return model(input_ids=torch.tensor([[token]]), position_ids=torch.tensor([[position]]), use_cache=True,
                     **{keyword: cache}).logits[:, -1]

    with torch.no_grad():
        for offset, token in enumerate(question):
            logits = step(token, start + offset)
        tokens = [int(logits.argmax(-1))]
        position = start + len(question)
        begin = time.perf_counter()
        for _ in range(steps - 1):
            tokens.append(int(step(tokens[-1], position).argmax(-1)))
            position += 1
        seconds = time.perf_counter() - begin
    return tokens, seconds / max(steps - 1, 1)


def warm_up(model, cache, prompt):
    """One untimed prefill and decode of a prompt's first tokens: the first call's one-off costs (kernels, threads,
    allocations) left out of every measured step."""
    prefill(model, cache, prompt["context"][:64])
    greedy(model, cache, prompt["question"], 2, 64)


def prefill(model, cache, context):
    """The context's forward into `cache`; its seconds."""
    start = time.perf_counter()
    with torch.no_grad():
        model(input_ids=torch.tensor([context]), use_cache=True, logits_to_keep=1, **{cache_keyword(model): cache})
    return time.perf_counter() - start
