"""Shared test setup: offline mode, the repository's paths, the real data beside it, tiny model configs,
running a command.

End-to-end tests (scripts, the sweep, the benchmark, the wheel) and the real-model probe of the
synthetic task are marked `slow`: `pytest -m "not slow"` is the quick loop, CI runs everything.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest -n 2 (the README's test command): one thread per worker, for it and the scripts it runs,
    # so two workers share the two cores instead of fighting over them
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)

# transformers' log handler keeps the sys.stderr of the moment it is made: make it now, while that is pytest's
# session-long capture, not the capsys stream of the first test to import transformers (closed when that test ends:
# a later warning would then print "--- Logging error ---" and a traceback into another test's stderr)
import transformers.utils.logging  # noqa: E402

transformers.utils.logging.get_logger("transformers")

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "papa_scripts"
SHARED_DATA = REPO.parent / "shared" / "data"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

# A tiny random BERT/RoBERTa: 2 layers x 4 heads, hidden 16 (head size 4), positions for T <= 40.
TINY = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=20,
            max_position_embeddings=40)


# pytest -n auto (pytest.ini) hands whole files to the workers in collection order: the longest first, so
# that the workers finish together instead of one waiting on the last long file
LONGEST_FIRST = ["test_scripts.py", "test_launchers.py", "test_families_e2e.py", "test_decoders_e2e.py",
                 "test_scripts_ner.py", "test_grid.py", "test_sweep.py", "test_wheel.py", "test_synthetic.py",
                 "test_bundled_decoders.py", "test_cli_runs.py", "test_controls.py", "test_benchmark.py",
                 "test_averaging.py"]


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def tiny_config(kind="bert", **overrides):
    """A tiny config of `kind` ("bert" or "roberta"), TINY with `overrides`."""
    from transformers import BertConfig, RobertaConfig

    cls = BertConfig if kind == "bert" else RobertaConfig
    return cls(**{**TINY, "pad_token_id": 1 if kind == "roberta" else 0, **overrides})


def run_command(argv, check=True, env=None, timeout=600, **kwargs):
    """Run `argv` offline, output captured; `env`: more variables (None unsets one); with `check`, a failure
    shows the output's tail."""
    env = {**os.environ, **OFFLINE, **(env or {})}
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in env.items() if v is not None}, **kwargs)
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, argv))}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


# The sweep's smallest run: 32 train / 16 eval examples of the repeat task, T=32, one epoch, k = 0 and 72
# (--per_device_eval_batch_size is not the sweep's: it is passed through to the training runs).
TINY_SWEEP = ["--max_train_samples", "32", "--max_eval_samples", "16", "--num_train_epochs", "1",
              "--sort_num_train_epochs", "1", "--static_heads_nums", "0", "72", "--max_seq_length", "32",
              "--per_device_eval_batch_size", "16"]


def script(name):
    """argv prefix running papa_scripts/<name> with this interpreter."""
    return [sys.executable, str(SCRIPTS / name)]


def load_module(path):
    """A script of the repository outside the package (under docs/, findings/, benchmarks/, .ci/) imported as a module."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (real GLUE and CoNLL-2003 files); tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the repo in CI)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """One finished TINY_SWEEP run of papa_scripts/run_papa_sweep.py: (output folder, its CompletedProcess)."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    return out, run_command(script("run_papa_sweep.py") + ["--output_dir", out, *TINY_SWEEP])
