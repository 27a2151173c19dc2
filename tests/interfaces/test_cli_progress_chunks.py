"""Issue 42 item 2: ``kb add`` on a base with a model counts chunks, says the cost first, and
piped prints one line every 5 s at most (the real CLI in a subprocess, stderr piped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

# 10 texts a second: a 400-chunk import is a 40 s one, long enough to be announced
SLOW_MODEL = "hash:d64?delay=1"


def _kb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "KNOWBASE_HOME": str(tmp_path / "home"),
        "KNOWBASE_TEST_PROVIDERS": "1",
        "COLUMNS": "200",
    }


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """100 files of about 4 chunks each (default chunk size 1,024 tokens)."""
    root = tmp_path / "corpus"
    root.mkdir()
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "river",
        "mountain",
        "coffee",
        "machine",
        "descale",
        "policy",
    ]
    for n in range(100):
        body = " ".join(words[(n + i * 7) % len(words)] for i in range(1800))
        (root / f"doc{n:03d}.md").write_text(f"# Doc {n}\n\n{body}\n", "utf-8")
    return root


def test_a_long_import_says_its_cost_and_counts_chunks(env, corpus: Path) -> None:
    _kb(env, "base", "create", "b", "--embedding", SLOW_MODEL)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "knowbase.interfaces.cli", "add", "b", str(corpus)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[tuple[float, str]] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - started, line.rstrip()))
            if sum("files " in text for _, text in lines) >= 3:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    texts = [text for _, text in lines]
    shown = "\n".join(texts)
    # before it starts: what it will cost, and the way out
    cost = texts[0]
    found = re.search(r"≈ ([\d,]+) chunks from 100 file", cost)
    assert found, shown
    assert 300 <= int(found.group(1).replace(",", "")) <= 500, cost
    assert "chunks/s" in cost and "BM25-only base is ready in seconds" in cost, cost
    assert "kb base enable-embedding b" in cost, cost
    progress = [(t, text) for t, text in lines if text.startswith("files ")]
    # the first file is done long before the first batch of 64 (25 s at this rate)
    assert int(re.match(r"files (\d+)/100", progress[0][1]).group(1)) >= 1, shown
    for _, text in progress:
        assert re.search(r"chunks [\d,]+/≈?[\d,]+ embedded · [\d.]+ chunks/s, ~", text), shown
    # chunks move between lines, and piped output is one line every 5 s at most
    done = [int(re.search(r"chunks ([\d,]+)/", t).group(1)) for _, t in progress]
    assert done[-1] > done[0], shown
    gaps = [b[0] - a[0] for a, b in zip(progress, progress[1:], strict=False)]
    assert all(gap >= 4.5 for gap in gaps), (gaps, shown)


def test_a_short_import_is_not_announced(env, tmp_path: Path) -> None:
    _kb(env, "base", "create", "b", "--embedding", SLOW_MODEL)
    (tmp_path / "one.md").write_text("# One\n\nA short note about otters.\n", "utf-8")
    out = _kb(env, "add", "b", str(tmp_path / "one.md"))
    assert "This import will embed" not in out.stderr
    assert "1 indexed" in out.stdout
