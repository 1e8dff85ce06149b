"""A long ranking's progress, saved as it goes, so that a run killed late (preempted on a cluster, out of time)
resumes where it stopped instead of starting again.

loo on SmolLM2 takes about 43 minutes here, iterative rankers and gates longer, and loo on a 7B model hours on a GPU.
So the rankers (papa.method.rankers) report what they have done to a `Progress`: loo and taylor the sums after
each batch, iterative each finished round (and its scorer's batches inside a round), the gates their α and
optimiser state every few steps. It is written atomically (papa.io) to `ranking_progress.pt` in the ranking run's
folder, at most every `every_s` seconds and at every round's end; the finished ranking removes it.

A re-run resumes only what is its own: the file holds a fingerprint of what is being ranked (the ranker and its
options, the units, the ranking data's tokens, the constants the model mixes with), and a file with another
fingerprint is set aside with a line saying so. The work is deterministic and resumed from the very sums it
saved, so a resumed ranking equals an uninterrupted one to the bit (tests/test_ranking_progress.py kills real
runs). The sweep keeps the file when it redoes an unfinished stage (papa.sweep.stages), and so does a Slurm
requeue, which runs the stage again.
"""

import hashlib
import os
import time

import torch

from ..console import stage
from ..io import atomic_path

PROGRESS_FILE = "ranking_progress.pt"
EVERY_ENV = "PAPA_PROGRESS_EVERY_S"  # seconds between saves (0: every step; tests)
PAUSE_ENV = "PAPA_PROGRESS_PAUSE_S"  # sleep after each save (tests kill a run there)
EVERY_S = 30.0


def fingerprint(options, units, batches, model):
    """A digest of what a ranking ranks: `options` (a JSON-able dict), the units, every batch's tensors, and the
    constants the model's attention mixes with (its PAPA parameters: constants, structured sinks and profiles)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(repr(sorted(options.items())).encode())
    digest.update(repr(units).encode())
    for batch in batches:
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(batch[key].detach().cpu().contiguous().numpy().tobytes())
    for name, tensor in model.state_dict().items():
        if name.rsplit(".", 1)[-1] in ("constant_matrices", "structured_sink", "structured_profile",
                                       "output_corrections", "mean_outputs"):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Progress:
    """Saved ranking state under `path`, keyed by scope (an iterative round's scorer is a scope of its own)."""

    def __init__(self, path, fingerprint, every_s=None):
        self.path, self.fingerprint = os.fspath(path), fingerprint
        self.every_s = float(os.environ.get(EVERY_ENV, EVERY_S)) if every_s is None else every_s
        self.state, self.last = {}, time.monotonic()
        path = self.path
        if os.path.isfile(path):
            try:
                saved = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as err:  # a file this code did not write whole: atomic writes make this rare
                saved = {}
                stage(f"{path} is unreadable ({type(err).__name__}): ranking from the start")
            if saved.get("fingerprint") == fingerprint:
                self.state = saved.get("state", {})
                stage(f"resuming the ranking from {path}")
            elif saved:
                os.replace(path, path + ".other")
                stage(f"{path} ranked other data, units or constants: set aside as {os.path.basename(path)}.other, "
                      "ranking from the start")

    def get(self, scope):
        """The state saved for `scope`, or None."""
        return self.state.get(scope)

    def save(self, scope, value, force=False):
        """Record `scope`'s state; written when forced or `every_s` seconds have passed since the last write."""
        self.state[scope] = value
        if force or time.monotonic() - self.last >= self.every_s:
            with atomic_path(self.path) as tmp:
                with open(tmp, "wb") as f:
                    torch.save({"fingerprint": self.fingerprint, "state": self.state}, f)
            self.last = time.monotonic()
            pause = float(os.environ.get(PAUSE_ENV, 0))
            if pause:
                time.sleep(pause)

    def finish(self):
        """The ranking is written: its progress is no longer needed."""
        if os.path.isfile(self.path):
            os.remove(self.path)


class NoProgress:
    """A ranking that saves nothing (the Python API's default)."""

    def get(self, scope):
        return None

    def save(self, scope, value, force=False):
        pass

    def finish(self):
        pass
