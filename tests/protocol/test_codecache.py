"""The compiled-codec disk cache: same code objects as compiling, never stale, never fatal."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdissect.protocol import codecache

SOURCE = "def answer(x):\n    return x * 2 + 1\n"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KDISSECT_CACHE_DIR", str(tmp_path))
    codecache.reset()
    yield tmp_path
    codecache.reset()


def _run(code) -> int:
    ns: dict = {}
    exec(code, ns)  # noqa: S102
    return ns["answer"](20)


def test_second_use_loads_the_stored_code(cache_dir: Path) -> None:
    first = codecache.compile_cached(SOURCE, "<test codec>")
    entries = list(cache_dir.rglob("*.marshal"))
    assert len(entries) == 1
    # the stored entry is what is returned next time (not a recompilation)
    stored = marshal.loads(entries[0].read_bytes())
    assert stored.co_consts == first.co_consts
    entries[0].write_bytes(marshal.dumps(compile("def answer(x):\n    return -1\n", "<test codec>", "exec")))
    assert _run(codecache.compile_cached(SOURCE, "<test codec>")) == -1


def test_key_covers_source_and_label(cache_dir: Path) -> None:
    codecache.compile_cached(SOURCE, "<a>")
    codecache.compile_cached(SOURCE, "<b>")
    codecache.compile_cached(SOURCE.replace("+ 1", "+ 2"), "<a>")
    assert len(list(cache_dir.rglob("*.marshal"))) == 3
    assert _run(codecache.compile_cached(SOURCE.replace("+ 1", "+ 2"), "<a>")) == 42


def test_damaged_entry_is_recompiled(cache_dir: Path) -> None:
    codecache.compile_cached(SOURCE, "<test codec>")
    (entry,) = cache_dir.rglob("*.marshal")
    entry.write_bytes(b"\x00garbage")
    assert _run(codecache.compile_cached(SOURCE, "<test codec>")) == 41


def test_unwritable_or_disabled_cache_still_compiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KDISSECT_CACHE_DIR", str(blocker))
    codecache.reset()
    try:
        assert _run(codecache.compile_cached(SOURCE, "<x>")) == 41
        monkeypatch.setenv("KDISSECT_CACHE_DIR", "")
        codecache.reset()
        assert codecache.cache_directory() is None
        assert _run(codecache.compile_cached(SOURCE, "<x>")) == 41
    finally:
        codecache.reset()


def test_cached_codecs_decode_like_fresh_ones(tmp_path: Path, repo_root: Path) -> None:
    """A process filling the cache and one reading it export the same rows."""
    capture = repo_root / "captures" / "produce_acks1.pcap"
    env = dict(os.environ, KDISSECT_CACHE_DIR=str(tmp_path))
    outputs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-q"],
                             cwd=repo_root, env=env, capture_output=True, check=True)
        outputs.append(run.stdout)
    assert list(tmp_path.rglob("*.marshal"))
    uncached = subprocess.run([sys.executable, "-m", "kdissect", "export", str(capture), "-q"], cwd=repo_root,
                              env=dict(os.environ, KDISSECT_CACHE_DIR=""), capture_output=True, check=True)
    assert outputs[0] == outputs[1] == uncached.stdout
    assert outputs[0].count(b"\n") > 10
