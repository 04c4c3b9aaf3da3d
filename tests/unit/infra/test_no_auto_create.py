"""Asking for a topic's metadata never creates it (Tansu would, wrong-sized)."""

from __future__ import annotations

from aiokafka.protocol.metadata import MetadataRequest

import infra.kafka  # noqa: F401 - applies the setting


def test_metadata_requests_do_not_ask_the_broker_to_create_topics() -> None:
    from aiokafka.protocol.metadata import MetadataRequest_v5

    struct = MetadataRequest(["inferbus.results"]).build(MetadataRequest_v5)
    assert struct.allow_auto_topic_creation is False
