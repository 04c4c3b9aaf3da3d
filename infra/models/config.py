"""`model.yaml`: a model's inputs, outputs, batching, SLOs, replicas and engine, validated."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.yaml_unique import safe_load_unique
from schemas.errors import InferbusError, describe_validation_error
from schemas.tensors import DType
from schemas.topics import TIERS, Tier, is_legal_model_name


class ModelConfigError(InferbusError):
    """model.yaml is missing, unreadable or invalid; the message names the field."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TensorSpec(_Frozen):
    """A declared input or output; `-1` marks a dynamic dimension, the first is the batch."""

    name: str
    dtype: DType
    shape: list[int] = Field(min_length=1)
    allow_nan: bool = Field(default=False, description="Accept NaN/inf in float inputs.")

    def matches_shape(self, shape: list[int]) -> bool:
        """True when `shape` fits this spec, dynamic dimensions matching anything."""
        declared = self.shape
        if len(shape) != len(declared):
            return False
        # A loop, not all() over a generator: checked per input of every request.
        for want, got in zip(declared, shape, strict=True):  # noqa: SIM110
            if want not in (-1, got):
                return False
        return True


class TokenizerConfig(_Frozen):
    """A `tokenizers` JSON file that turns `text` inputs into ids and a mask."""

    file: str = "tokenizer.json"
    max_length: int = Field(default=512, gt=0)
    input_ids: str = "input_ids"
    attention_mask: str | None = "attention_mask"
    token_type_ids: str | None = None


class BatchingConfig(_Frozen):
    """Dynamic batching: whichever of size or delay is reached first closes a batch."""

    max_batch_size: int = Field(default=32, gt=0)
    max_queue_delay_ms: float = Field(default=5.0, ge=0)
    preferred_batch_sizes: list[int] = Field(default_factory=list)
    sequence_input: str | None = Field(
        default=None, description="Input whose axis 1 is the sequence length (for buckets)."
    )
    length_buckets: list[int] = Field(
        default_factory=list, description="Upper bounds of sequence-length buckets, ascending."
    )
    pad_token_id: int = 0

    @model_validator(mode="after")
    def _consistent(self) -> BatchingConfig:
        if self.length_buckets != sorted(set(self.length_buckets)):
            raise ValueError("length_buckets must be ascending and distinct")
        if any(size > self.max_batch_size for size in self.preferred_batch_sizes):
            raise ValueError("preferred_batch_sizes cannot exceed max_batch_size")
        if self.length_buckets and self.sequence_input is None:
            raise ValueError("length_buckets need sequence_input (the input to bucket on)")
        return self


class TierSlo(_Frozen):
    """A tier's latency objective and admission bound."""

    p99_e2e_ms: float = Field(gt=0)
    max_queue: int = Field(default=10_000, gt=0, description="Lag above which ingest rejects.")


def _default_slos() -> dict[Tier, TierSlo]:
    return {
        "critical": TierSlo(p99_e2e_ms=200, max_queue=2_000),
        "interactive": TierSlo(p99_e2e_ms=500, max_queue=5_000),
        "batch": TierSlo(p99_e2e_ms=60_000, max_queue=100_000),
    }


class ReplicaBounds(_Frozen):
    """How many workers a group may have; `warm` are kept even when idle."""

    min: int = Field(default=1, ge=0)
    max: int = Field(default=12, ge=1)
    warm: int = Field(default=1, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ReplicaBounds:
        if not self.min <= self.max:
            raise ValueError(f"replicas.min {self.min} > replicas.max {self.max}")
        if self.warm > self.max:
            raise ValueError(f"replicas.warm {self.warm} > replicas.max {self.max}")
        return self


Provider = Literal["tensorrt", "cuda", "cpu"]


def _default_providers() -> list[Provider]:
    return ["tensorrt", "cuda", "cpu"]


class SimConfig(_Frozen):
    """Calibrated latency model of the `sim` engine: time = a + b·units.

    A version folder may hold its own `sim.yaml` with these fields (a simulated version
    that is slower, or fails), over model.yaml's `engine.sim`.
    """

    a_ms: float = Field(default=1.0, ge=0)
    b_ms: float = Field(default=0.05, ge=0)
    per: Literal["token", "sample"] = "sample"
    error_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of samples the simulated engine fails (the same samples every time), to
    rehearse a bad version; 1 fails even the warm-up, so the version cannot load."""


class EngineConfig(_Frozen):
    """Which backend runs the model, and how."""

    kind: Literal["onnxruntime", "tensorrt", "sim"] = "onnxruntime"
    providers: list[Provider] = Field(default_factory=_default_providers)
    fp16: bool = False
    engine_cache_dir: str = Field(
        default=".inferbus/trt-cache",
        description="TensorRT engine cache; a relative path is taken from the working directory.",
    )
    intra_op_num_threads: int = Field(default=1, ge=0, description="0 lets ONNX Runtime choose.")
    intra_op_spinning: bool = Field(
        default=False,
        description="Let ONNX Runtime's intra-op threads spin between runs. Off: on a host "
        "whose cores also run the broker and ingest, spinning threads take their CPU.",
    )
    profile_min: dict[str, list[int]] = Field(default_factory=dict)
    profile_opt: dict[str, list[int]] = Field(default_factory=dict)
    profile_max: dict[str, list[int]] = Field(default_factory=dict)
    sim: SimConfig = Field(default_factory=SimConfig)
    device_id: int = Field(default=0, ge=0, description="CUDA device for the GPU providers.")
    workspace_mb: int | None = Field(
        default=None, gt=0, description="TensorRT builder workspace limit; null keeps its default."
    )
    provider_options: dict[Provider, dict[str, str | int | float | bool]] = Field(
        default_factory=dict,
        description="Raw ONNX Runtime provider options, applied over the ones derived here.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        if not self.providers:
            raise ValueError("engine.providers needs at least one of tensorrt, cuda, cpu")
        if len(set(self.providers)) != len(self.providers):
            raise ValueError(f"engine.providers repeat: {self.providers}")
        for which in ("profile_min", "profile_opt", "profile_max"):
            for name, shape in getattr(self, which).items():
                if not shape or any(dim < 1 for dim in shape):
                    raise ValueError(f"engine.{which}[{name!r}] must be positive dims, got {shape}")
        for name in set(self.profile_min) | set(self.profile_opt) | set(self.profile_max):
            given = [
                p[name] for p in (self.profile_min, self.profile_opt, self.profile_max) if name in p
            ]
            if len(given) != 3:
                raise ValueError(f"engine profile for {name!r} needs all of min, opt and max")
            low, mid, high = given
            if len({len(low), len(mid), len(high)}) != 1 or not all(
                a <= b <= c for a, b, c in zip(low, mid, high, strict=True)
            ):
                raise ValueError(
                    f"engine profile for {name!r}: need min <= opt <= max per axis, "
                    f"got {low} / {mid} / {high}"
                )
        return self


class WarmupConfig(_Frozen):
    """Shapes to run before a worker registers ready (every bucket is covered)."""

    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    sequence_lengths: list[int] = Field(default_factory=list)


RouteKey = Literal["request_id", "tenant"]
_VERSION_NAME = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$"


class VerdictConfig(_Frozen):
    """When the scaler rolls a canary back by itself: worse than stable by a margin."""

    window_s: float = Field(default=300.0, gt=0, le=3600)
    """Results of the last this many seconds are compared."""
    min_requests: int = Field(default=100, ge=1)
    """Canary results the window must hold before any verdict (fewer: wait)."""
    max_error_rate_increase: float = Field(default=0.01, ge=0, le=1)
    """Roll back when the canary's error rate exceeds stable's by more than this (0.01 = 1
    percentage point); errors are `internal_error` results."""
    max_p99_ratio: float = Field(default=1.5, ge=1)
    """Roll back when the canary's p99 end-to-end exceeds stable's times this ..."""
    min_p99_increase_ms: float = Field(default=10.0, ge=0)
    """... and by more than this many ms (smaller differences are noise, never a verdict)."""


class RolloutConfig(_Frozen):
    """A canary rollout: the canary version takes `share` of the requests beside stable."""

    stable: str = Field(pattern=_VERSION_NAME)
    """The version stable workers serve (they never move to a newer folder by themselves)."""
    canary: str | None = Field(default=None, pattern=_VERSION_NAME)
    """The version canary workers serve, in their own groups; None: no canary."""
    share: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    """The canary's share of requests, 0..1 (a runtime decision on inferbus.rollouts
    overrides it)."""
    key: RouteKey = "request_id"
    """What the split hashes: `request_id`, or `tenant` (a tenant's requests all land on
    one side; requests without a tenant fall back to their id)."""
    verdict: VerdictConfig = Field(default_factory=VerdictConfig)
    """The automatic rollback's window and margins."""

    @model_validator(mode="after")
    def _consistent(self) -> RolloutConfig:
        if self.canary is not None and self.canary == self.stable:
            raise ValueError(
                f"rollout.canary {self.canary!r} is rollout.stable; a canary must be another "
                "version"
            )
        if self.canary is None and self.share > 0:
            raise ValueError(f"rollout.share {self.share:g} needs rollout.canary (a version)")
        return self

    def versions(self) -> dict[str, str]:
        """Setting name (`rollout.stable`, `rollout.canary`) → version it names."""
        named = {"rollout.stable": self.stable}
        if self.canary is not None:
            named["rollout.canary"] = self.canary
        return named


class ModelConfig(_Frozen):
    """Everything a worker, ingest and the scaler need to know about one model."""

    name: str
    description: str = ""
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(min_length=1)
    tokenizer: TokenizerConfig | None = None
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    slo: dict[Tier, TierSlo] = Field(default_factory=_default_slos)
    replicas: ReplicaBounds = Field(default_factory=ReplicaBounds)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    warmup: WarmupConfig = Field(default_factory=WarmupConfig)
    tiers: list[Tier] = Field(default_factory=lambda: list(TIERS))
    allowed_tenants: list[str] | None = Field(
        default=None, description="Tenants allowed to call the model; null allows any."
    )
    rollout: RolloutConfig | None = Field(
        default=None,
        description="Stable and canary versions and the canary's share; null: every worker "
        "serves the newest complete version.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if not is_legal_model_name(self.name):
            raise ValueError(f"name {self.name!r}: use lower-case letters, digits, '-' or '_'")
        names = [spec.name for spec in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"input names repeat: {names}")
        seq = self.batching.sequence_input
        if seq is not None and seq not in names:
            raise ValueError(f"batching.sequence_input {seq!r} is not one of the inputs {names}")
        if self.tokenizer is not None and self.tokenizer.input_ids not in names:
            raise ValueError(f"tokenizer.input_ids {self.tokenizer.input_ids!r} is not an input")
        if self.tokenizer is not None:
            for field in ("attention_mask", "token_type_ids"):
                wanted = getattr(self.tokenizer, field)
                if wanted is not None and wanted not in names:
                    raise ValueError(
                        f"tokenizer.{field} {wanted!r} is not an input (set it to null if the "
                        "model takes none)"
                    )
        for which in ("profile_min", "profile_opt", "profile_max"):
            for name, shape in getattr(self.engine, which).items():
                spec = self.input(name)
                if spec is None:
                    raise ValueError(f"engine.{which} names {name!r}, which is not an input")
                if len(shape) != len(spec.shape):
                    raise ValueError(
                        f"engine.{which}[{name!r}] has {len(shape)} dims; the input has "
                        f"{len(spec.shape)}"
                    )
        return self

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def slo_for(self, tier: Tier) -> TierSlo:
        return self.slo.get(tier) or _default_slos()[tier]

    @classmethod
    def load(cls, path: Path) -> ModelConfig:
        """Read and validate a model.yaml, or raise ModelConfigError naming the problem."""
        try:
            raw = safe_load_unique(path.read_text())
        except OSError as exc:
            raise ModelConfigError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
        except yaml.YAMLError as exc:
            raise ModelConfigError(f"{path} is not valid YAML: {exc}", path=str(path)) from exc
        if not isinstance(raw, dict):
            raise ModelConfigError(f"{path} must hold a mapping", path=str(path))
        raw.setdefault("name", path.parent.name)
        try:
            config = cls.model_validate(raw)
        except ValidationError as exc:
            problems = describe_validation_error(exc, limit=None)
            raise ModelConfigError(f"{path}: {problems}", path=str(path)) from exc
        if config.name != path.parent.name:
            raise ModelConfigError(
                f"{path}: name {config.name!r} differs from its folder {path.parent.name!r}",
                path=str(path),
            )
        if config.rollout is not None:
            _check_rollout_folders(path, config.rollout)
        return config

    def dump(self, path: Path) -> None:
        """Write as YAML (used by `inferbus models init` and `calibrate`)."""
        path.write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))


def _check_rollout_folders(path: Path, rollout: RolloutConfig) -> None:
    """Each version the rollout names must be a version folder beside model.yaml."""
    for setting, version in rollout.versions().items():
        if not (path.parent / version).is_dir():
            have = sorted(
                d.name for d in path.parent.iterdir() if d.is_dir() and not d.name.startswith(".")
            )
            raise ModelConfigError(
                f"{path}: {setting}: version folder {version!r} does not exist in "
                f"{path.parent} (have: {', '.join(have) or 'none'})",
                path=str(path),
                setting=setting,
            )
