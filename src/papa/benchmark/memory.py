"""Peak memory of one pass, measured in a fresh child process (papa.fork_server).

Each measurement runs in a process forked from a server that has only imported the libraries, so
no earlier model's memory or allocator state is in it. CPU: the increase of the process's peak
resident set (ru_maxrss) over the pass, with glibc told to serve large allocations by mmap so that
freed tensors leave at once; CUDA: torch.cuda.max_memory_allocated over the pass.
"""

import gc
import os
import resource
import sys

import torch

from .workloads import AVERAGING_VARIANTS, averaging_batches, load_encoder, touch_parameters, training_setup


def current_rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def set_malloc_mmap_threshold(nbytes):
    """glibc: serve allocations ≥ nbytes by mmap, so freed tensors leave the RSS at once.

    A fixed threshold also switches off glibc's dynamic one, whose heap reuse otherwise makes
    the RSS peak drift by tens of MB between runs (and creep with the number of batches) for
    every variant alike. Returns whether it took effect.
    """
    if nbytes <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, int(nbytes)))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def measure_memory(args, config, job):
    """In this (fresh) process: the peak memory figures of one job, an averaging pass ({"kind": "averaging",
    "variant", "batches", "layers"}) or two training steps ({"kind": "training", "variant"})."""
    if job["kind"] == "averaging":
        model = load_encoder(args, "eager", job.get("layers"))
        batches = averaging_batches(config, job["batches"], args.batch_size, args.avg_seq_len)
        run = lambda: AVERAGING_VARIANTS[job["variant"]](model, batches, args.avg_seq_len, args.device)  # noqa: E731
    else:
        model, _, step = training_setup(args, config, job["variant"], args.train_seq_len)

        def run():
            for _ in range(2):  # the second step runs with AdamW's state already allocated
                step()
    touch_parameters(model)
    return peak_increase(run, args.device, args.malloc_mmap_threshold)


def peak_increase(run, device, malloc_mmap_threshold):
    """Peak memory figures of `run()` in this (fresh) process, above what was allocated before it."""
    cuda = str(device).startswith("cuda")
    threshold = None if cuda else (malloc_mmap_threshold if set_malloc_mmap_threshold(malloc_mmap_threshold)
                                   else None)
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run()
        torch.cuda.synchronize()
        return {"peak_increase_mb": (torch.cuda.max_memory_allocated() - base) / 2**20,
                "memory_kind": "torch.cuda.max_memory_allocated − memory_allocated before the pass"}
    rss_before, peak_before = current_rss_mb(), peak_rss_mb()
    run()
    peak_after = peak_rss_mb()
    return {"peak_increase_mb": peak_after - peak_before, "rss_before_mb": rss_before,
            "peak_rss_before_mb": peak_before, "peak_rss_after_mb": peak_after,
            "memory_kind": "child process ru_maxrss increase over the pass",
            "malloc_mmap_threshold": threshold}
