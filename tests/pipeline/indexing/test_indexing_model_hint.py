"""The CJK model hint: a pure decision over a text sample, a bounded sampler, one CLI line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from knowbase.pipeline.indexing.model_hint import (
    SAMPLE_BYTES_PER_FILE,
    SUGGESTED_MODEL,
    model_hint,
    sample_text,
)
from knowbase.providers.multilingual import SCRIPTS as E5_SCRIPTS

LATIN = frozenset({"Latin"})
MINILM = "local:all-minilm-l6-v2"
ZH = "知识库把文件转换成文本，切成小段，再为每一段计算向量。"
EN = "The knowledge base converts each file to text and splits it into chunks. "


def test_mostly_chinese_on_a_latin_model_gets_the_hint() -> None:
    hint = model_hint(ZH * 3, model_id=MINILM, scripts=LATIN)
    assert hint is not None and SUGGESTED_MODEL in hint and MINILM in hint
    assert "knowbase[multilingual]" in hint


def test_no_hint_when_the_model_reads_it_or_the_text_is_not_mostly_cjk() -> None:
    assert model_hint(ZH * 3, model_id=SUGGESTED_MODEL, scripts=E5_SCRIPTS) is None
    assert model_hint(ZH * 3, model_id="ollama:bge-m3", scripts=None) is None  # reads all
    assert model_hint(ZH * 3, model_id="x:y", scripts=frozenset({"Latin", "Han"})) is None
    assert model_hint(ZH * 3, model_id=None, scripts=None) is None  # BM25-only: bigrams
    assert model_hint(EN * 3 + ZH, model_id=MINILM, scripts=LATIN) is None  # mostly English
    assert model_hint("知识库", model_id=MINILM, scripts=LATIN) is None  # too little to judge
    # Japanese is CJK too; a model reading Han but not kana still misses most of it.
    kana = "これはひらがなとカタカナのぶんしょうです" * 2
    assert model_hint(kana, model_id="x:y", scripts=frozenset({"Latin", "Han"})) is not None


@given(st.text(max_size=300))
def test_a_model_that_reads_every_script_never_gets_the_hint(sample: str) -> None:
    assert model_hint(sample, model_id="x:y", scripts=None) is None
    assert model_hint(sample, model_id="x:y", scripts=E5_SCRIPTS) is None


def test_sample_reads_text_files_only_skips_hidden_and_cuts_cleanly(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(ZH * 400, encoding="utf-8")  # far more than one sample
    (tmp_path / "b.txt").write_bytes(("旧编码的文本。" + ZH).encode("gb18030"))
    (tmp_path / "c.pdf").write_bytes(b"%PDF-1.7 binary")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.md").write_text("hidden " * 50, encoding="utf-8")
    text = sample_text([tmp_path, tmp_path / "missing"])
    assert "PDF" not in text and "hidden" not in text
    first = text.split("\n")[0]
    assert first and set(first) <= set(ZH)  # cut at a character boundary, no mojibake
    assert len(first.encode("utf-8")) <= SAMPLE_BYTES_PER_FILE
    assert "旧编码" in text  # a legacy encoding is detected, as the import would


def _kb(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "knowbase.interfaces.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KNOWBASE_HOME": str(home)},
        timeout=120,
    )


def test_kb_add_prints_the_hint_for_a_chinese_folder_only(tmp_path: Path) -> None:
    home, zh, en = tmp_path / "home", tmp_path / "zh", tmp_path / "en"
    for folder, text in ((zh, ZH), (en, EN)):
        folder.mkdir()
        (folder / "doc.md").write_text(text * 5, encoding="utf-8")
    # A test model that declares Latin only, like MiniLM, without loading one.
    created = _kb(home, "base", "create", "b", "--embedding", "hash:d16?scripts=Latin")
    assert created.returncode == 0, created.stderr
    added = _kb(home, "add", "b", str(zh), "--json")
    assert added.returncode == 0, added.stderr
    assert "hint:" in added.stderr and SUGGESTED_MODEL in added.stderr
    assert '"status"' in added.stdout  # --json output stays clean
    show = _kb(home, "base", "show", "b", "--json")
    assert '"hash:d16?scripts=Latin"' in show.stdout  # a hint only: the model is unchanged
    english = _kb(home, "add", "b", str(en))
    assert english.returncode == 0 and "hint:" not in english.stderr
