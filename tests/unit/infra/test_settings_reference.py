"""docs/settings.md follows the settings classes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra.settings_reference import (
    SECTIONS,
    attribute_docstrings,
    default_text,
    env_names,
    render,
)

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "settings.md"


def test_the_committed_reference_is_current() -> None:
    assert REFERENCE.read_text() == render(), "run `make settings-doc`"


def test_every_field_of_every_settings_class_has_a_doc() -> None:
    missing = [
        f"{section.settings.__name__}.{name}"
        for section in SECTIONS
        for name, field in section.settings.model_fields.items()
        if name not in attribute_docstrings(section.settings) and not field.description
    ]
    assert missing == []


class Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERBUS_X_", populate_by_name=True)

    plain: int = 3
    """A number."""
    shared: str = Field(default="d", validation_alias=AliasChoices("INFERBUS_X_SHARED", "S"))
    listed: list[str] = Field(default_factory=lambda: ["a", "b"])
    off: bool = False
    unset: int | None = None


@pytest.mark.parametrize(
    ("name", "variables", "default"),
    [
        pytest.param("plain", ["INFERBUS_X_PLAIN"], "3", id="prefixed"),
        pytest.param("shared", ["INFERBUS_X_SHARED", "S"], "d", id="aliases-in-order"),
        pytest.param("listed", ["INFERBUS_X_LISTED"], '["a", "b"]', id="factory"),
        pytest.param("off", ["INFERBUS_X_OFF"], "false", id="bool"),
        pytest.param("unset", ["INFERBUS_X_UNSET"], "unset", id="none"),
    ],
)
def test_a_field_is_shown_by_its_variables_and_default(
    name: str, variables: list[str], default: str
) -> None:
    field = Example.model_fields[name]
    assert env_names(Example, name, field) == variables
    assert default_text(field) == default


def test_docstrings_are_read_from_the_class_body() -> None:
    assert attribute_docstrings(Example) == {"plain": "A number."}
