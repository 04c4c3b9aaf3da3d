"""Span attribute names, stage names and the per-request attribute set, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from opentelemetry.util.types import AttributeValue

Stage = Literal[
    "ingest", "queue", "batch_wait", "preprocess", "infer", "postprocess", "publish", "e2e"
]
STAGES: tuple[Stage, ...] = (
    "ingest",
    "queue",
    "batch_wait",
    "preprocess",
    "infer",
    "postprocess",
    "publish",
    "e2e",
)
"""Stages in the order a request meets them; `e2e` is the whole request."""

SummedStage = Literal["wait", "engine"]
SUMMED_STAGES: dict[SummedStage, tuple[Stage, ...]] = {
    "wait": ("queue", "batch_wait"),
    "engine": ("preprocess", "infer", "postprocess"),
}
"""Per-request sums of stages, recorded beside them in the stage histograms (no span of
their own): `wait` is what scaling can shrink, `engine` what it cannot. The p99 of a sum
is what the scaler reads; the sum of the stages' p99s only bounds it from above (the
requests that wait longest are rarely the ones the engine takes longest on)."""

MODEL = "inferbus.model"
MODEL_VERSION = "inferbus.model_version"
TIER = "inferbus.tier"
BATCH_SIZE = "inferbus.batch_size"
BATCH_ID = "inferbus.batch_id"
PROVIDER = "inferbus.provider"
REQUEST_ID = "inferbus.request_id"
STAGE = "inferbus.stage"
REQUEST_COUNT = "inferbus.request_count"
"""How many requests a stage span's duration applies to (a batch's engine spans: its size)."""

MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_GROUP = "messaging.consumer.group.name"
MESSAGING_PARTITION = "messaging.destination.partition.id"
MESSAGING_OFFSET = "messaging.kafka.offset"
MESSAGING_KEY = "messaging.kafka.message.key"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"
ERROR_TYPE = "error.type"


@dataclass(frozen=True, slots=True)
class RequestAttrs:
    """What a span may say about a request: identity and placement, never inputs or outputs."""

    model: str | None = None
    tier: str | None = None
    model_version: str | None = None
    request_id: str | None = None
    provider: str | None = None
    batch_size: int | None = None
    batch_id: str | None = None

    def as_attributes(self) -> dict[str, AttributeValue]:
        """The set fields as `inferbus.*` span attributes."""
        pairs: tuple[tuple[str, AttributeValue | None], ...] = (
            (MODEL, self.model),
            (TIER, self.tier),
            (MODEL_VERSION, self.model_version),
            (REQUEST_ID, self.request_id),
            (PROVIDER, self.provider),
            (BATCH_SIZE, self.batch_size),
            (BATCH_ID, self.batch_id),
        )
        return {key: value for key, value in pairs if value is not None}
