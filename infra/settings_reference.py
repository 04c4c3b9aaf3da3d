"""docs/settings.md: every environment variable inferbus's settings read, with its default
and what it does, written from the settings classes themselves.

    python -m infra.settings_reference > docs/settings.md      # (`make settings-doc`)

A unit test compares the file with `render()`, so a setting cannot be added, renamed or
re-described without the reference following.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from dataclasses import dataclass

from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from infra import eventloop
from infra.security import KafkaSecuritySettings
from infra.settings import BrokerSettings, KafkaSettings
from scaler.settings import ScalerSettings
from services.ingest.settings import IngestSettings
from services.worker.settings import WorkerSettings
from tracing.jaeger import DEFAULT_JAEGER_URL, JAEGER_URL_ENV


@dataclass(frozen=True)
class Section:
    """One settings class: who reads it and where its reasoning is written."""

    title: str
    settings: type[BaseSettings]
    read_by: str


SECTIONS = (
    Section("Kafka clients", KafkaSettings, "every process; reasoning in docs/kafka.md"),
    Section("Kafka security", KafkaSecuritySettings, "every Kafka client; see docs/security.md"),
    Section("Embedded broker", BrokerSettings, "`inferbus up`, `inferbus broker`, the tests"),
    Section("Ingest", IngestSettings, "`inferbus ingest` (flags win over these)"),
    Section("Worker", WorkerSettings, "`inferbus worker` (flags win over these)"),
    Section("Scaler", ScalerSettings, "`inferbus scaler run` and `inferbus up`"),
)


OUTSIDE_SETTINGS = (
    (
        eventloop.ENV,
        "auto",
        "the event loop every service runs on: `auto` (uvloop when installed), `asyncio` "
        "or `uvloop`; read before any loop starts, so before the settings classes",
    ),
    (
        JAEGER_URL_ENV,
        DEFAULT_JAEGER_URL,
        "Jaeger's query API for `inferbus trace` and `inferbus traces` (the `--jaeger` flag wins)",
    ),
)
"""Variables read outside the settings classes: (name, default, what it does)."""


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right below its annotation in the class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def env_names(settings: type[BaseSettings], name: str, field: FieldInfo) -> list[str]:
    """The variables a field is read from, first found wins."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str) and choice.isupper()]
    if isinstance(alias, str):
        return [alias.upper()]
    prefix = str(settings.model_config.get("env_prefix", ""))
    return [f"{prefix}{name}".upper()]


def default_text(field: FieldInfo) -> str:
    """The default as a reader would type it."""
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ", ".join(f'"{item}"' for item in value) + "]"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    """The whole of docs/settings.md."""
    lines = [
        "# Settings reference",
        "",
        "Every environment variable inferbus's settings classes read, with its default. "
        "Written by `make settings-doc` (`python -m infra.settings_reference`) from the "
        "classes' own field docs, so it follows the code; a unit test fails when it does "
        "not. Tracing uses the standard `OTEL_*` variables (docs/tracing.md).",
        "",
    ]
    for section in SECTIONS:
        settings = section.settings
        docs = attribute_docstrings(settings)
        lines += [
            f"## {section.title}",
            "",
            f"`{settings.__module__}.{settings.__name__}`, read by {section.read_by}.",
            "",
            "| variable | default | what it does |",
            "|---|---|---|",
        ]
        for name, field in settings.model_fields.items():
            variables = " or ".join(f"`{env}`" for env in env_names(settings, name, field))
            what = docs.get(name) or field.description or ""
            default = default_text(field)
            shown = default if default in ("unset", "(required)") else f"`{_cell(default)}`"
            lines.append(f"| {variables} | {shown} | {_cell(what)} |")
        lines.append("")
    lines += [
        "## Read outside the settings classes",
        "",
        "| variable | default | what it does |",
        "|---|---|---|",
        *(
            f"| `{name}` | `{default}` | {_cell(what)} |"
            for name, default, what in OUTSIDE_SETTINGS
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
