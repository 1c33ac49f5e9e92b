"""A BERT sentence encoder written as an ONNX graph from its safetensors, without torch.

The default embedder runs all-MiniLM-L6-v2 on ONNX Runtime. Exporting it with
``torch.onnx.export`` would need torch (hundreds of megabytes, and on Linux pip picks the CUDA
build by default) for a one-time conversion; but a BERT encoder is a short, fixed recipe, so
it is written here op by op with ``onnx.helper``, its weights read by ``safetensors.numpy``.
The result is the graph sentence-transformers computes (checked to cosine >= 0.9999 against
it in the test suite), with pooling and normalisation inside:

    embeddings = LayerNorm(word[ids] + position[0..S) + token_type[types])
    per layer:   x = LayerNorm(x + Attention(x, mask));  x = LayerNorm(x + FFN(x))
    output:      L2-normalise(mean of x over the unmasked tokens)   (or the first token)

The layers run on the batch's real tokens only (see :meth:`_Builder.layers`): a batch is
padded to its longest text, and the dense layers, nearly all of the model's arithmetic, would
otherwise run on the padding too (4-8% of the tokens of chat batched by length).

Only the standard ONNX operators (opset 17) are used. onnxruntime fuses them itself when it
loads the graph (``ORT_ENABLE_ALL``: each bias into its matrix product, GELU, the attention's
scaled product), with the same arithmetic. Writing the layers with onnxruntime's own
``Attention`` and ``SkipLayerNormalization`` operators instead, as its transformer optimizer
does, measured 15-20% fewer texts per CPU-second on its CPU kernels (onnxruntime 1.32, 1 and 2
threads, chat texts of 26 and 49 tokens on average: ``benchmarks/bench_embeddings.py``), so
the graph is left plain; the same graph also feeds int8 quantisation, whose quantiser knows
only standard operators. Any BERT-style model (``BertModel`` in ``config.json``, absolute
positions) can be built; others are refused with an
:class:`~harombe_core.errors.EmbeddingError` that names the alternative.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harombe_core.errors import EmbeddingError, requires_extra

if TYPE_CHECKING:
    import onnx

__all__ = ["INPUTS", "OPSET", "build_bert_graph"]

#: The graph's inputs (int64, [batch, sequence]) and opset (LayerNormalization needs 17).
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17

#: Added to the attention scores of padding: exp() of it is exactly 0 in float32.
_MASKED = -3.4e38


class _Builder:
    """Writes the graph of one model: nodes, initializers, fresh names for the values."""

    def __init__(
        self, onnx_module: Any, weights: dict[str, np.ndarray], source: Path, config: dict[str, Any]
    ) -> None:
        self.onnx = onnx_module
        self.weights = weights
        self.source = source
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._named: set[str] = set()
        self._count = 0
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))

    # building blocks ------------------------------------------------------------------------
    def const(self, name: str, value: np.ndarray) -> str:
        """An initializer (once per name: a constant used by every layer is stored once)."""
        from onnx import numpy_helper

        if name not in self._named:
            self._named.add(name)
            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        self._count += 1
        out = f"{kind.lower()}_{self._count}"
        self.nodes.append(self.onnx.helper.make_node(kind, list(inputs), [out], **attributes))
        return out

    def weight(self, name: str) -> np.ndarray:
        try:
            return self.weights[name].astype(np.float32)
        except KeyError:
            raise EmbeddingError(
                f"{self.source / 'model.safetensors'} lacks the tensor {name!r}; is it a BERT "
                "encoder? Use the sentence-transformers backend ('st:<path>') for it"
            ) from None

    def param(self, name: str, transpose: bool = False) -> str:
        """A weight as an initializer; torch's Linear stores [out, in], MatMul wants [in, out]."""
        value = self.weight(name)
        return self.const(name, value.T if transpose else value)

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, np.array(value, dtype=np.float32))

    def ints(self, name: str, *values: int) -> str:
        return self.const(name, np.array(values, dtype=np.int64))

    def linear(self, x: str, prefix: str) -> str:
        """``x @ W + bias``; torch's Linear stores W as [out, in]."""
        weight = self.param(f"{prefix}.weight", transpose=True)
        return self.op("Add", self.op("MatMul", x, weight), self.param(f"{prefix}.bias"))

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.param(f"{prefix}.weight"),
            self.param(f"{prefix}.bias"),
            axis=-1,
            epsilon=self.eps,
        )

    # the model ------------------------------------------------------------------------------
    def embeddings(self) -> str:
        """Words, positions 0..S-1 (the first S rows of the table), token types; a norm."""
        length = self.op("Shape", "input_ids", start=1, end=2)
        words = self.op(
            "Gather", self.param("embeddings.word_embeddings.weight"), "input_ids", axis=0
        )
        places = self.op(
            "Slice",
            self.param("embeddings.position_embeddings.weight"),
            self.ints("zero_1d", 0),
            length,
            self.ints("axis_0", 0),
        )
        types = self.op(
            "Gather",
            self.param("embeddings.token_type_embeddings.weight"),
            "token_type_ids",
            axis=0,
        )
        summed = self.op("Add", self.op("Add", words, places), types)
        return self.layer_norm(summed, "embeddings.LayerNorm")

    def packing(self) -> tuple[str, str]:
        """Where the batch's real tokens are, from the attention mask: ``tokens`` ([T], each
        real token's place in the batch flattened to [B*S]) and ``places`` ([B*S], each
        place's row among the T real tokens; padding points at row 0, a real token whose
        values the attention mask keeps out of every result)."""
        flat = self.op("Reshape", "attention_mask", self.ints("flat", -1))
        tokens = self.op("Reshape", self.op("NonZero", flat), self.ints("flat", -1))
        counted = self.op("CumSum", flat, self.const("axis_0_scalar", np.array(0, np.int64)))
        rows = self.op("Sub", counted, self.ints("one_int", 1))
        real = self.op("Cast", flat, to=self.onnx.TensorProto.BOOL)
        return tokens, self.op("Where", real, rows, self.ints("zero_1d", 0))

    def layers(self, x: str, mask: str, count: int) -> str:
        """The encoder layers in standard operators, on the batch's real tokens only.

        The dense layers (the projections and the feed-forward block: nearly all of the
        arithmetic) treat every token alike, so they run on the [T, hidden] matrix of the real
        tokens, gathered once from the padded [B, S] batch; only attention, which mixes the
        tokens of a text, gathers them back into the padded shape. Nothing is computed for
        padding but the attention scores it is masked out of, and the 2-D matrices let
        onnxruntime fold each bias into its matrix product (``Gemm``).
        """
        heads, size = self.heads, self.hidden // self.heads
        tokens, places = self.packing()
        # Padding gets a score that softmax turns into exactly 0: [B, 1, 1, S].
        blocked = self.op("Sub", self.scalar("one", 1.0), mask)
        bias = self.op("Mul", blocked, self.scalar("masked", _MASKED))
        bias = self.op("Unsqueeze", bias, self.ints("axes_1_2", 1, 2))
        batch = self.op("Shape", "input_ids")  # [B, S]
        split = self.op("Concat", batch, self.ints("heads_size", heads, size), axis=0)
        rows = self.ints("rows_hidden", -1, self.hidden)
        scale = self.scalar("attention_scale", 1.0 / math.sqrt(size))
        x = self.op("Gather", self.op("Reshape", x, rows), tokens, axis=0)
        for i in range(count):
            p = f"encoder.layer.{i}"

            def heads_of(name: str, perm: list[int], x: str = x, p: str = p) -> str:
                projected = self.linear(x, f"{p}.attention.self.{name}")
                padded = self.op("Gather", projected, places, axis=0)
                return self.op("Transpose", self.op("Reshape", padded, split), perm=perm)

            q = heads_of("query", [0, 2, 1, 3])
            k = heads_of("key", [0, 2, 3, 1])
            v = heads_of("value", [0, 2, 1, 3])
            scores = self.op("Add", self.op("Mul", self.op("MatMul", q, k), scale), bias)
            context = self.op("MatMul", self.op("Softmax", scores, axis=-1), v)
            context = self.op("Reshape", self.op("Transpose", context, perm=[0, 2, 1, 3]), rows)
            context = self.op("Gather", context, tokens, axis=0)
            attended = self.linear(context, f"{p}.attention.output.dense")
            x = self.layer_norm(self.op("Add", attended, x), f"{p}.attention.output.LayerNorm")
            inner = self.linear(x, f"{p}.intermediate.dense")
            # Exact GELU, as BERT's "gelu": 0.5 * h * (1 + erf(h / sqrt(2))).
            erf = self.op("Erf", self.op("Div", inner, self.scalar("sqrt2", math.sqrt(2.0))))
            inner = self.op(
                "Mul", self.op("Mul", inner, self.op("Add", erf, "one")), self.scalar("half", 0.5)
            )
            out = self.linear(inner, f"{p}.output.dense")
            x = self.layer_norm(self.op("Add", out, x), f"{p}.output.LayerNorm")
        shape = self.op("Concat", batch, self.ints("hidden_1d", self.hidden), axis=0)
        return self.op("Reshape", self.op("Gather", x, places, axis=0), shape)  # [B, S, hidden]

    def pool(self, x: str, mask: str, pooling: str) -> None:
        """Mean over the unmasked tokens (or the first token), L2-normalised: ``embedding``."""
        axis1 = self.ints("axis_1", 1)
        if pooling == "cls":
            first = self.op("Gather", x, self.ints("first", 0), axis=1)
            pooled = self.op("Squeeze", first, axis1)
        else:
            weights = self.op("Unsqueeze", mask, self.ints("axis_last", -1))
            total = self.op("ReduceSum", self.op("Mul", x, weights), axis1, keepdims=0)
            count = self.op("ReduceSum", weights, axis1, keepdims=0)
            pooled = self.op("Div", total, self.op("Max", count, self.scalar("tiny", 1e-9)))
        # ReduceL2 takes its axes as an attribute until opset 18.
        norm = self.op("ReduceL2", pooled, axes=[-1], keepdims=1)
        norm = self.op("Max", norm, self.scalar("tiny_norm", 1e-12))
        self.nodes.append(self.onnx.helper.make_node("Div", [pooled, norm], ["embedding"]))


def _config(model_dir: Path) -> dict[str, Any]:
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read {model_dir / 'config.json'}: {exc}") from exc
    kind = config.get("model_type")
    act = config.get("hidden_act", "gelu")
    positions = config.get("position_embedding_type", "absolute")
    if kind != "bert" or act != "gelu" or positions != "absolute":
        raise EmbeddingError(
            f"the model in {model_dir} is {kind!r} with {act!r} activation and {positions!r} "
            "positions; the ONNX backend builds only BERT encoders (gelu, absolute positions) "
            "without torch. Use the sentence-transformers backend ('st:<path>') for it"
        )
    return config


def _weights(model_dir: Path) -> dict[str, np.ndarray]:
    path = model_dir / "model.safetensors"
    if not path.exists():
        raise EmbeddingError(
            f"{model_dir} has no model.safetensors; the ONNX backend reads only safetensors "
            "weights. Use the sentence-transformers backend ('st:<path>') for this model"
        )
    with requires_extra("reading the model's weights", extra="onnx", module="safetensors"):
        from safetensors.numpy import load_file
    weights = load_file(str(path))
    # Some checkpoints name the encoder's tensors with the model's prefix ("bert.").
    return {name.removeprefix("bert."): value for name, value in weights.items()}


def build_bert_graph(model_dir: Path, pooling: str = "mean") -> onnx.ModelProto:
    """The ONNX model of the sentence-transformers BERT encoder in ``model_dir``.

    Inputs are :data:`INPUTS`; the output ``embedding`` ([batch, hidden], float32) is pooled
    (``mean`` over the attention mask, or ``cls``) and L2-normalised. Standard operators only
    (see the module docstring for why), so any ONNX runtime runs it and the int8 quantiser
    reads it. Needs the ``onnx`` and ``safetensors`` packages (the ``onnx`` extra), not torch.
    """
    with requires_extra("building the ONNX model (done once, then cached)", "onnx", "onnx"):
        import onnx
        from onnx import TensorProto, helper
    config = _config(model_dir)
    b = _Builder(onnx, _weights(model_dir), model_dir, config)
    layers = int(config["num_hidden_layers"])
    x = b.embeddings()
    mask = b.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    x = b.layers(x, mask, layers)
    b.pool(x, mask, pooling)

    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in INPUTS
    ]
    output = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", b.hidden])
    graph = helper.make_graph(b.nodes, "sentence_encoder", inputs, [output], b.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="harombe"
    )
    model.ir_version = min(model.ir_version, 8)  # readable by onnxruntime >= 1.14
    onnx.checker.check_model(model)
    return model
