"""`inferbus up` on its embedded (plain-text) broker refuses a process set for TLS or SASL
at once: it waited 52 s for a TLS answer, then blamed the broker."""

from __future__ import annotations

import pytest

from infra.security import KafkaSecurityError, KafkaSecuritySettings
from services.cli.stack import refuse_security_for_the_embedded_broker


@pytest.mark.parametrize(
    ("protocol", "refused"),
    [("PLAINTEXT", False), ("SSL", True), ("SASL_PLAINTEXT", True), ("SASL_SSL", True)],
)
def test_the_embedded_broker_takes_plain_text_clients_only(protocol: str, refused: bool) -> None:
    settings = KafkaSecuritySettings.model_construct(security_protocol=protocol)
    if not refused:
        refuse_security_for_the_embedded_broker(settings)
        return
    with pytest.raises(KafkaSecurityError, match=f"PROTOCOL={protocol}: unset"):
        refuse_security_for_the_embedded_broker(settings)
