"""Every Kafka client of the project is built by infra.kafka's factories (and so is secured)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[3]
PACKAGES = ("services", "scaler", "tracing", "infra", "schemas")
DIRECT = re.compile(r"\b(AIOKafkaProducer|AIOKafkaConsumer|AIOKafkaAdminClient|KafkaBroker)\(")


def test_no_kafka_client_is_built_outside_the_factories() -> None:
    direct = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "infra" / "kafka.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if DIRECT.search(line)
    ]
    assert direct == [], "use make_producer/make_consumer/make_admin/make_broker:\n" + "\n".join(
        direct
    )
