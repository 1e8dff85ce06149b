"""Shared fixtures: offline mode, the real data beside the repo, the bundled MiniLM."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (real GLUE and CoNLL-2003 files); tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (it sits beside the repo in CI)")
    return SHARED_DATA
