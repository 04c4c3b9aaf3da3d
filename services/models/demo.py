"""Deterministic demo models (`demo-mlp`, `demo-encoder`) built from a seed with onnx.helper."""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from infra.files import write_atomic
from infra.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    SimConfig,
    TensorSpec,
    TokenizerConfig,
    WarmupConfig,
)

OPSET = 17
"""LayerNormalization needs 17; ONNX Runtime >= 1.16 runs it."""
IR_VERSION = 8
"""The IR version of opset 17, so older runtimes that reject newer IR still load the file."""

MLP = "demo-mlp"
ENCODER = "demo-encoder"
DEMO_MODELS = (MLP, ENCODER)

ENCODER_HIDDEN = 256
ENCODER_HEADS = 4
ENCODER_LAYERS = 3
ENCODER_FFN = 1024
ENCODER_MAX_LEN = 512
ENCODER_BUCKETS = [32, 64, 128, 256, 512]

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class _Graph:
    """A small builder: named initializers from a seeded generator, nodes with fresh names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray[Any, Any]) -> str:
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(name, value)

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{op_type.lower()}_{self._count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(
            graph,
            producer_name="inferbus.demo",
            opset_imports=[helper.make_opsetid("", OPSET)],
        )
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model

    def rename_last(self, new_name: str) -> None:
        self.nodes[-1].output[0] = new_name


def build_mlp(seed: int) -> onnx.ModelProto:
    """`x` float32 [N,16] -> dense(32) -> relu -> dense(4) -> softmax -> `y` float32 [N,4]."""
    g = _Graph(seed)
    w1 = g.weight("dense1.weight", (16, 32), 1 / math.sqrt(16))
    b1 = g.weight("dense1.bias", (32,), 0.1)
    w2 = g.weight("dense2.weight", (32, 4), 1 / math.sqrt(32))
    b2 = g.weight("dense2.bias", (4,), 0.1)
    hidden = g.op("Relu", g.op("Gemm", "x", w1, b1))
    g.op("Softmax", g.op("Gemm", hidden, w2, b2), axis=-1)
    g.rename_last("y")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    return g.model(MLP, [x], [y])


def _layer_norm(g: _Graph, x: str, prefix: str) -> str:
    gamma = g.const(f"{prefix}.gamma", np.ones(ENCODER_HIDDEN, dtype=np.float32))
    beta = g.const(f"{prefix}.beta", np.zeros(ENCODER_HIDDEN, dtype=np.float32))
    return g.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-12)


def _dense(g: _Graph, x: str, prefix: str, fan_in: int, fan_out: int) -> str:
    w = g.weight(f"{prefix}.weight", (fan_in, fan_out), 1 / math.sqrt(fan_in))
    b = g.weight(f"{prefix}.bias", (fan_out,), 0.02)
    return g.op("Add", g.op("MatMul", x, w), b)


def _encoder_layer(g: _Graph, x: str, mask_bias: str, i: int) -> str:
    d, heads = ENCODER_HIDDEN, ENCODER_HEADS
    head_dim = d // heads
    split = g.const(f"layer{i}.split_shape", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = g.const(f"layer{i}.merge_shape", np.array([0, 0, d], dtype=np.int64))
    scale = g.const(f"layer{i}.scale", np.array(1 / math.sqrt(head_dim), dtype=np.float32))

    def heads_of(name: str, perm: list[int]) -> str:
        projected = _dense(g, x, f"layer{i}.attn.{name}", d, d)
        return g.op("Transpose", g.op("Reshape", projected, split), perm=perm)

    q = heads_of("q", [0, 2, 1, 3])  # [N,H,S,dh]
    k = heads_of("k", [0, 2, 3, 1])  # [N,H,dh,S]
    v = heads_of("v", [0, 2, 1, 3])
    scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), mask_bias)
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    merged = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge)
    attended = _layer_norm(
        g, g.op("Add", x, _dense(g, merged, f"layer{i}.attn.out", d, d)), f"layer{i}.ln1"
    )

    inner = _dense(g, attended, f"layer{i}.ffn.in", d, ENCODER_FFN)
    # GELU as 0.5·x·(1 + erf(x/√2)): opset 17 has no Gelu op; ORT fuses this pattern.
    half = g.const(f"layer{i}.half", np.array(0.5, dtype=np.float32))
    one = g.const(f"layer{i}.one", np.array(1.0, dtype=np.float32))
    sqrt2 = g.const(f"layer{i}.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    erf = g.op("Erf", g.op("Div", inner, sqrt2))
    gelu = g.op("Mul", g.op("Mul", inner, g.op("Add", erf, one)), half)
    outer = _dense(g, gelu, f"layer{i}.ffn.out", ENCODER_FFN, d)
    return _layer_norm(g, g.op("Add", attended, outer), f"layer{i}.ln2")


def build_encoder(seed: int, vocab_size: int) -> onnx.ModelProto:
    """A BERT-style encoder: embeddings, post-LN layers, mask-aware mean pooling."""
    g = _Graph(seed)
    d = ENCODER_HIDDEN
    tokens = g.weight("embeddings.word", (vocab_size, d), 0.02)
    positions = g.weight("embeddings.position", (ENCODER_MAX_LEN, d), 0.02)

    zero = g.const("zero", np.array(0, dtype=np.int64))
    one = g.const("one", np.array(1, dtype=np.int64))
    seq_len = g.op("Squeeze", g.op("Gather", g.op("Shape", "input_ids"), one, axis=0))
    position_ids = g.op("Range", zero, seq_len, one)
    embedded = g.op(
        "Add", g.op("Gather", tokens, "input_ids"), g.op("Gather", positions, position_ids)
    )
    x = _layer_norm(g, embedded, "embeddings.ln")

    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)  # [N,S]
    axes_12 = g.const("axes_1_2", np.array([1, 2], dtype=np.int64))
    fone = g.const("float_one", np.array(1.0, dtype=np.float32))
    neg = g.const("mask_neg", np.array(-1e4, dtype=np.float32))
    mask_bias = g.op(
        "Mul", g.op("Sub", fone, g.op("Unsqueeze", mask, axes_12)), neg
    )  # [N,1,1,S]: 0 where attended, -1e4 on padding

    for i in range(ENCODER_LAYERS):
        x = _encoder_layer(g, x, mask_bias, i)

    axis_2 = g.const("axis_2", np.array([2], dtype=np.int64))
    axis_1 = g.const("axis_1", np.array([1], dtype=np.int64))
    tiny = g.const("tiny", np.array(1e-9, dtype=np.float32))
    summed = g.op("ReduceSum", g.op("Mul", x, g.op("Unsqueeze", mask, axis_2)), axis_1, keepdims=0)
    count = g.op("Max", g.op("ReduceSum", mask, axis_1, keepdims=1), tiny)  # [N,1]
    g.op("Div", summed, count)
    g.rename_last("embedding")

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"])
    attn = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "S"])
    out = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", d])
    return g.model(ENCODER, [ids, attn], [out])


def demo_vocab() -> list[str]:
    """A deterministic WordPiece vocabulary (~19k): specials, characters, 2-3 letter pieces."""
    letters = string.ascii_lowercase
    chars = list(letters + string.digits + string.punctuation)
    pairs = [a + b for a in letters for b in letters]
    triples = [a + b + c for a in letters for b in letters for c in letters]
    continuation = ["##" + piece for piece in [*letters, *string.digits, *pairs]]
    return [*SPECIAL_TOKENS, *chars, *pairs, *triples, *continuation]


def build_tokenizer_json(max_length: int = ENCODER_MAX_LEN) -> str:
    """A BERT-like WordPiece tokenizer over `demo_vocab()`, serialised by `tokenizers`."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = {token: i for i, token in enumerate(demo_vocab())}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer.to_str(pretty=True)


def mlp_config() -> ModelConfig:
    return ModelConfig(
        name=MLP,
        description="Demo: two dense layers and a softmax over 4 classes (seeded weights).",
        inputs=[TensorSpec(name="x", dtype="float32", shape=[-1, 16])],
        outputs=[TensorSpec(name="y", dtype="float32", shape=[-1, 4])],
        batching=BatchingConfig(max_batch_size=32, max_queue_delay_ms=2.0),
        engine=EngineConfig(sim=SimConfig(a_ms=0.05, b_ms=0.002, per="sample")),
        warmup=WarmupConfig(batch_sizes=[1, 32]),
    )


def encoder_config() -> ModelConfig:
    seq_inputs = ("input_ids", "attention_mask")
    return ModelConfig(
        name=ENCODER,
        description=(
            f"Demo: {ENCODER_LAYERS}-layer transformer encoder (hidden {ENCODER_HIDDEN}, "
            f"{ENCODER_HEADS} heads), mean-pooled over the attention mask (seeded weights)."
        ),
        inputs=[
            TensorSpec(name="input_ids", dtype="int64", shape=[-1, -1]),
            TensorSpec(name="attention_mask", dtype="int64", shape=[-1, -1]),
        ],
        outputs=[TensorSpec(name="embedding", dtype="float32", shape=[-1, ENCODER_HIDDEN])],
        tokenizer=TokenizerConfig(file="tokenizer.json", max_length=ENCODER_MAX_LEN),
        batching=BatchingConfig(
            max_batch_size=32,
            max_queue_delay_ms=5.0,
            sequence_input="input_ids",
            length_buckets=ENCODER_BUCKETS,
        ),
        engine=EngineConfig(
            profile_min={name: [1, 1] for name in seq_inputs},
            profile_opt={name: [32, 32] for name in seq_inputs},
            profile_max={name: [32, ENCODER_MAX_LEN] for name in seq_inputs},
            sim=SimConfig(a_ms=1.0, b_ms=0.05, per="token"),
        ),
        warmup=WarmupConfig(batch_sizes=[1, 32], sequence_lengths=ENCODER_BUCKETS),
    )


def _config_bytes(config: ModelConfig) -> bytes:
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False).encode()


def _demo_files(name: str, seed: int) -> dict[str, Callable[[], bytes]]:
    """Relative path -> producer of its bytes; model.onnx goes last so it marks completion."""
    if name == MLP:
        return {
            "model.yaml": lambda: _config_bytes(mlp_config()),
            "1/model.onnx": lambda: build_mlp(seed).SerializeToString(),
        }
    vocab_size = len(demo_vocab())
    return {
        "model.yaml": lambda: _config_bytes(encoder_config()),
        "tokenizer.json": lambda: build_tokenizer_json().encode(),
        "1/model.onnx": lambda: build_encoder(seed, vocab_size).SerializeToString(),
    }


def write_demo_models(root: Path, *, seed: int = 0, overwrite: bool = False) -> list[Path]:
    """Write `demo-mlp` and `demo-encoder` under `root`; return the files written.

    A model whose folder already has a model.yaml is left alone unless `overwrite`.
    The same seed always gives byte-identical files.
    """
    root = Path(root)
    written: list[Path] = []
    for name in DEMO_MODELS:
        base = root / name
        if (base / "model.yaml").exists() and not overwrite:
            continue
        for relative, produce in _demo_files(name, seed).items():
            path = base / relative
            write_atomic(path, produce())
            written.append(path)
    return written
