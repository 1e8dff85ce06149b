"""The averaging pass's peak memory is flat in the number of batches and of layers (papa.method.averaging's claim).

What is counted: the bytes of every CPU tensor storage an operation creates during the pass and
that is still alive, at its highest (a TorchDispatchMode sees each operation's outputs; a weakref
on each new storage sees it freed). Views and in-place results share their input's storage and
are not counted again. This is exact and deterministic, unlike the process's resident memory,
which the allocator's caching blurs at these tiny sizes. The same count of the original PAPA loop
(every layer's attentions at once) grows with the layers: the count can see growth.
"""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import BertModel

from papa.method.averaging import accumulate_attention
from papa.benchmark.workloads import original_accumulate
from tiny_encoders import H, T, padded_batch, tiny_config


class LiveStorageBytes(TorchDispatchMode):
    """Bytes of the tensor storages created inside this mode and still alive: `now` and `peak`."""

    def __init__(self):
        super().__init__()
        self.live, self.now, self.peak = {}, 0, 0

    def _freed(self, key):
        self.now -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
                continue
            storage = tensor.untyped_storage()
            if storage._cdata in inputs or storage._cdata in self.live:  # a view, or in place: not new memory
                continue
            self.live[storage._cdata] = storage.nbytes()
            self.now += storage.nbytes()
            weakref.finalize(storage, self._freed, storage._cdata)
        self.peak = max(self.peak, self.now)
        return out


def counted(averaging, num_layers, num_batches):
    """(peak bytes above what is still alive after the pass, bytes still alive) of `averaging(model, batches)`."""
    config = tiny_config("bert")
    config.num_hidden_layers = num_layers
    torch.manual_seed(0)
    model = BertModel(config, add_pooling_layer=False).eval()
    batches = [dict(zip(("input_ids", "attention_mask"), padded_batch("bert", seed=seed))) for seed in range(num_batches)]
    with LiveStorageBytes() as count:
        result = averaging(model, batches)
        kept = count.now
    del result
    return count.peak - kept, kept


def ours(mean_outputs):
    return lambda model, batches: accumulate_attention(model, batches, T, mean_outputs=mean_outputs)


def original(model, batches):
    return original_accumulate(model, batches, T, "cpu")


@pytest.mark.parametrize("mean_outputs", [False, True])
def test_averaging_peak_is_flat_in_batches_and_layers(mean_outputs):
    # from 3 layers on the peak lies in a middle layer (the last one stops early); 2 and 8 batches, 3 and 6 layers
    working = {(layers, n): counted(ours(mean_outputs), layers, n) for layers, n in ((3, 2), (3, 8), (6, 2))}
    assert working[3, 2][0] == working[3, 8][0] == working[6, 2][0] > 0
    # what stays is the sums alone, float64: attention [L, H, T, T], patterns [T, T] (and outputs [L, H, T, d])
    head_dim = tiny_config("bert").hidden_size // H
    for (layers, _), (_, kept) in working.items():
        assert kept == 8 * (layers * H * T * T + T * T + (layers * H * T * head_dim if mean_outputs else 0))


def test_the_count_sees_the_original_loop_grow_with_the_layers():
    three, six = counted(original, 3, 2)[0], counted(original, 6, 2)[0]
    batch = len(padded_batch("bert")[0])
    assert six - three >= 3 * batch * H * T * T * 4  # three more layers' float32 probabilities held at once
    assert counted(original, 3, 8)[0] == three  # still flat in the batches: each batch's copy is freed
