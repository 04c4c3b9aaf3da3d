"""YAML that a person wrote: a mapping that names a key twice is refused, not half read."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that raises for a key written twice in one mapping (PyYAML keeps
    the last in silence: `replicas:` twice in a model.yaml served the second)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:  # `<<: *base`, whose keys a mapping may override
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader says "found unhashable key" itself
            if key in seen:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found {key!r} written twice in one mapping (the last would win)",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def safe_load_unique(text: str) -> Any:
    """`yaml.safe_load`, raising a `yaml.YAMLError` that names the key and its line for a
    mapping that writes a key twice."""
    return yaml.load(text, Loader=_UniqueKeyLoader)
