"""The sweep's fork server never initialises CUDA: a child forked after a CUDA context exists cannot use CUDA.

The check runs in a child forked from the server, which inherits the server's state: torch imported (the server
preloads it, or the check would say nothing) and CUDA not initialised. On a machine without a GPU the second part
holds trivially; the GPU check (benchmarks/gpu_check.sh) runs this file where it does not.
"""

import multiprocessing
import sys

import pytest

from papa.sweep.child import start_fork_server


def _report_cuda_state():
    """In the forked child: exit 0 if torch was already imported and CUDA is not initialised."""
    if "torch" not in sys.modules:
        sys.exit(3)  # not forked from a server that preloaded torch: the check would be empty
    import torch

    sys.exit(4 if torch.cuda.is_initialized() else 0)


@pytest.mark.cuda  # also run by the GPU check, where it means most
@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server here")
def test_the_fork_server_never_initialises_cuda():
    start_fork_server()
    child = multiprocessing.get_context("forkserver").Process(target=_report_cuda_state)
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0, {3: "torch was not preloaded", 4: "CUDA was initialised"}.get(child.exitcode,
                                                                                              child.exitcode)
