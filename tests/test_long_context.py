"""Long contexts: a decoder's averages stored as lower triangles (layout 2) against the full matrices, old files,
the distributed sums, float32 sums against float64 ones, and models patched from either."""

import copy
import os

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from torch.testing import assert_close

import papa
from papa.errors import PapaError
from papa.families import block_triangle
from papa.families.block_triangle import pack_blocks
from papa.method.averaging import AttentionAverager, accumulate_attention, shard
from papa.method.layouts import PackedConstants, pack, packed_record, unpack
from tiny_decoders import H, L, T, right_padded_batch, tiny_decoder

from test_averaging import _free_port


def batches(ids, mask, size, indices=None):
    indices = list(range(len(ids))) if indices is None else indices
    for start in range(0, len(indices), size):
        yield {"input_ids": ids[indices[start:start + size]], "attention_mask": mask[indices[start:start + size]]}


def data():
    return right_padded_batch(seed=5, lengths=(T, 7, 3, T, 1, 9, T))


def test_pack_is_numpys_lower_triangle_row_by_row():
    x = torch.randn(2, 3, 6, 6)
    rows, cols = np.tril_indices(6)  # numpy's order: row by row, j = 0..i
    assert_close(pack(x), torch.from_numpy(x.numpy()[..., rows, cols]))
    assert torch.equal(unpack(pack(x), 6), torch.from_numpy(np.tril(x.numpy())))
    with pytest.raises(PapaError, match="has 21 entries"):
        unpack(torch.zeros(3, 20), 6)


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2"])
def test_lower_triangle_files_equal_the_full_matrices(tmp_path, name):
    """The same pass saved both ways: layout 2's avgs.pt and sums unpack to layout 1's values (padding included:
    rows and columns of padded positions are 0 in both), and load as the full tensor does."""
    model = tiny_decoder(name, "eager", head="base")
    ids, mask = data()
    full = accumulate_attention(model, batches(ids, mask, 3), T, lower_triangle=False)
    tri = accumulate_attention(model, batches(ids, mask, 3), T)
    assert tri.lower_triangle and tri.attention_sums.shape == (L, H, T * (T + 1) // 2)
    assert tri.attention_sums.dtype == torch.float32 and full.attention_sums.dtype == torch.float64
    assert torch.equal(full.attention_sums.triu(1), torch.zeros(L, H, T, T))  # nothing lost above the diagonal
    assert_close(tri.full_sums().double(), full.attention_sums, rtol=1e-6, atol=1e-6)
    full.save(tmp_path / "full")
    tri.save(tmp_path / "tri")
    record = torch.load(tmp_path / "tri" / "avgs.pt", weights_only=True)
    assert record["papa_layout"] == 2 and record["seq_len"] == T and record["values"].dtype == torch.float32
    loaded = papa.load_constant_matrices(tmp_path / "tri", L, H)
    assert isinstance(loaded, PackedConstants) and loaded.shape == (L, H, T, T)
    want = papa.load_constant_matrices(tmp_path / "full", L, H)
    assert_close(loaded.full(), want, rtol=1e-6, atol=1e-7)
    assert_close(loaded[1, 2], want[1, 2], rtol=1e-6, atol=1e-7)
    assert_close(torch.from_numpy(np.asarray(loaded)), want, rtol=1e-6, atol=1e-7)
    sums = torch.load(tmp_path / "tri" / "attention_sums.pt", weights_only=True)
    assert_close(unpack(sums["values"], T), torch.load(tmp_path / "full" / "attention_sums.pt"), rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.load(tmp_path / "tri" / "attention_patterns_sums.pt"),
                       torch.load(tmp_path / "full" / "attention_patterns_sums.pt"))
    with pytest.raises(PapaError, match="saved"):  # its float32 sums became the averages
        tri.add_attention(0, torch.zeros(1, H, T, T), torch.ones(1, T))


def test_unseen_positions_stay_zero_in_the_triangle():
    averager = AttentionAverager(1, 1, 4, lower_triangle=True)
    probs = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]])
    averager.update([probs[None, None]], torch.tensor([[1, 1, 0, 0]]))
    want = torch.zeros(1, 1, 4, 4)
    want[0, 0, :2, :2] = probs[:2, :2]
    assert torch.equal(averager.averages(), want)


def test_old_files_still_load(tmp_path):
    """The original's bare [L, H, T, T] tensor, in both of torch's serialisations, loads as before."""
    want = torch.rand(L, H, T, T)
    for i, zipped in enumerate((True, False)):
        folder = tmp_path / str(i)
        folder.mkdir()
        torch.save(want, folder / "avgs.pt", _use_new_zipfile_serialization=zipped)
        got = papa.load_constant_matrices(folder, L, H)
        assert isinstance(got, torch.Tensor) and torch.equal(got, want)


def test_unknown_or_damaged_layouts_are_clear_errors(tmp_path):
    torch.save({"papa_layout": 3, "values": torch.zeros(1)}, tmp_path / "avgs.pt")
    with pytest.raises(PapaError, match="layout 3.*upgrade papa"):
        papa.load_constant_matrices(tmp_path)
    torch.save(packed_record(torch.zeros(L, H, 10), T), tmp_path / "avgs.pt")
    with pytest.raises(PapaError, match="damaged lower-triangle file"):
        papa.load_constant_matrices(tmp_path)
    torch.save(packed_record(torch.zeros(L, H + 1, T * (T + 1) // 2), T), tmp_path / "avgs.pt")
    with pytest.raises(PapaError, match="computed for another model"):
        papa.load_constant_matrices(tmp_path, L, H)


def test_float32_sums_against_float64_sums():
    """2 000 batches of the same probabilities: float64 sums are exact to 1e-9; the float32 triangle's error
    stays within the naive-summation bound n·ε·sum, and is what docs/long_context.md reports."""
    g = torch.Generator().manual_seed(0)
    probs = torch.rand(1, 1, 2, 2, generator=g).tril()
    exact, f32 = AttentionAverager(1, 1, 2), AttentionAverager(1, 1, 2, lower_triangle=True)
    for _ in range(2000):
        for averager in (exact, f32):
            averager.update([probs], torch.ones(1, 2))
    want = 2000 * probs.double()
    assert (exact.attention_sums - want).abs().max() < 1e-9
    error = (f32.full_sums().double() - want).abs().max().item()
    assert error < 2000 * torch.finfo(torch.float32).eps * want.max().item()


def _worker(rank, world_size, port, out_dir):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        ids, mask = data()
        averager = accumulate_attention(tiny_decoder("llama", "eager", head="base"),
                                        batches(ids, mask, 2, shard(len(ids), rank, world_size)), T)
        averager.all_reduce()
        if rank == 0:
            averager.save(out_dir)
    finally:
        dist.destroy_process_group()


def test_distributed_lower_triangles_equal_one_process(tmp_path):
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ids, mask = data()
    single = accumulate_attention(tiny_decoder("llama", "eager", head="base"), batches(ids, mask, 2), T,
                                  lower_triangle=False)
    assert_close(papa.load_constant_matrices(tmp_path).full(), single.averages(), rtol=1e-6, atol=1e-7)
    sums = torch.load(tmp_path / "attention_sums.pt", weights_only=True)["values"]
    assert_close(unpack(sums, T), single.attention_sums.float(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mix", [False, True])
def test_a_model_patched_from_the_triangle_file_equals_one_from_the_full_tensor(tmp_path, monkeypatch, mix):
    """Padding included; the patched layers holding full matrices, and strips of 2 rows (so T = 12 takes them)."""
    stock = tiny_decoder("llama", "eager")
    ids, mask = data()
    tri = accumulate_attention(stock, batches(ids, mask, 3), T)
    full = tri.averages()
    tri.save(tmp_path)
    static = None if mix else [[0, 1], [1, 0], [1, 3], [2, 2]]
    want_model = papa.patch_model(copy.deepcopy(stock), full, static_heads=static, mix_all_heads=mix)
    flat_model = papa.patch_model(copy.deepcopy(stock), tmp_path, static_heads=static, mix_all_heads=mix)
    monkeypatch.setattr(block_triangle, "BLOCK", 2)
    got_model = papa.patch_model(copy.deepcopy(stock), tmp_path, static_heads=static, mix_all_heads=mix)
    heads = list(range(H)) if mix else [0, 3]
    assert_close(papa.families.attention_modules(flat_model)[1].constant_matrices.data, full[1, heads])
    module = papa.families.attention_modules(got_model)[1]
    assert module.papa_lower_triangular and module.papa_block == 2
    assert_close(module.constant_matrices.data, pack_blocks(full[1, heads], 2))
    with torch.no_grad():
        want = want_model(input_ids=ids, attention_mask=mask).logits
        got = got_model(input_ids=ids, attention_mask=mask).logits
        assert_close(flat_model(input_ids=ids, attention_mask=mask).logits, want)
    real = mask.bool()
    assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_the_band_is_folded_into_the_stored_constants():
    """Mistral's window of 4: the stored constants are zero outside it from the patch on and after a state-dict
    load; while they train, their gradient stays inside it."""
    model = papa.patch_model(tiny_decoder("mistral", "eager"), torch.ones(L, H, T, T), static_heads=[[0, 1], [0, 3]])
    module = papa.families.attention_modules(model)[0]
    i, j = np.indices((T, T))
    band = torch.from_numpy((i - j >= 0) & (i - j < 4))
    assert torch.equal(module.constant_matrices.data, band.float().expand(2, T, T))
    name = next(n for n, _ in model.named_parameters() if n.endswith("constant_matrices"))
    model.load_state_dict({**model.state_dict(), name: torch.ones(2, T, T)})
    assert torch.equal(module.constant_matrices.data, band.float().expand(2, T, T))
    ids, mask = right_padded_batch()
    model(input_ids=ids, attention_mask=mask).logits.sum().backward()
    grad = module.constant_matrices.grad
    assert grad[:, band].abs().sum() > 0 and grad[:, ~band].abs().sum() == 0
