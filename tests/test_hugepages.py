"""Huge pages for PyTorch's CPU tensors: `import papa` leaves the environment alone, a command's start asks
for them and keeps the user's choice, and the request reaches PyTorch's allocator (page faults of a large
tensor drop by an order of magnitude)."""

import os
import subprocess
import sys

import pytest

from papa import hugepages

# In a fresh interpreter: import papa (the variable as it was after that), start a command (papa.cli.command),
# then fill a fresh 64 MiB tensor and count the page faults it took.
PROBE = """
import os, resource
import papa, papa.cli, torch
after_import = os.environ.get("THP_MEM_ALLOC_ENABLE")
papa.cli.command(lambda argv: None, [])
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.empty(16 * 2**20).fill_(1.0)
print(after_import, os.environ.get("THP_MEM_ALLOC_ENABLE"), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def probe(choice):
    env = {k: v for k, v in os.environ.items() if k != hugepages.VARIABLE}
    if choice is not None:
        env[hugepages.VARIABLE] = choice
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    after_import, variable, faults = out.stdout.split()
    assert after_import == str(choice)  # import papa changed nothing: "None" where unset
    return variable, int(faults)


@pytest.fixture(scope="module")
def probes():
    return {"unset": probe(None), "0": probe("0")}


def test_a_command_asks_for_huge_pages_and_keeps_an_explicit_choice(probes):
    assert probes["unset"][0] == "1"
    assert probes["0"][0] == "0"


@pytest.mark.skipif(hugepages.kernel_mode() != "madvise",
                    reason=f"kernel THP mode {hugepages.kernel_mode()}: only under 'madvise' does PyTorch's advice "
                           "alone decide (under 'always' every large region gets huge pages anyway)")
def test_the_request_reaches_pytorchs_allocator_before_its_first_large_tensor(probes):
    with_huge_pages, without = probes["unset"][1], probes["0"][1]
    assert without > 10_000  # 64 MiB in 4 KiB pages: ~16 400 faults
    assert with_huge_pages < without / 4  # 2 MiB pages: tens to hundreds


def test_kernel_mode_reads_the_bracketed_choice(tmp_path, monkeypatch):
    mode_file = tmp_path / "enabled"
    mode_file.write_text("always [madvise] never\n")
    monkeypatch.setattr(hugepages, "KERNEL_MODE", str(mode_file))
    assert hugepages.kernel_mode() == "madvise"
    monkeypatch.setattr(hugepages, "KERNEL_MODE", str(tmp_path / "missing"))
    assert hugepages.kernel_mode() is None
