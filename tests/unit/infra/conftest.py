"""Fixtures of the infra unit tests."""

from __future__ import annotations

import pytest

from tests.pki import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server and a client certificate with their keys (PEM files)."""
    return make_pki(tmp_path_factory.mktemp("pki"))
