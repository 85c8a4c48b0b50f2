"""The YAML a configuration file may use: mappings, lists and scalars, each key once.

    data = load_plain(stream)        # PlainYamlError naming the field and the line

Note [plain YAML]: every file the suite reads (scenario, sweep, run config, profile) is
parsed by `PlainLoader`, a `yaml.SafeLoader` that refuses, while it composes the document
and before anything is built from it, anchors and aliases (`&base`, `*base`), merge keys
(`<<:`), a key written twice in one mapping (naming the key and both lines) and nesting
deeper than MAX_DEPTH levels. Why each is refused: docs/architecture/train-config.md, "Configuration
files". The file's size is bounded before parsing, in specfile.load (it holds for JSON
too). Imports only yaml and the standard library.
"""

from __future__ import annotations

from typing import IO, Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = ["MAX_DEPTH", "PlainLoader", "PlainYamlError", "load_plain"]

MAX_DEPTH = 32  # levels of mappings and lists inside one another
MERGE_TAG = "tag:yaml.org,2002:merge"
REFUSED = "anchors, aliases and merge keys are not accepted in configuration files"


class PlainYamlError(ValueError):
    """YAML that parses but is refused (Note [plain YAML]); the message names the field
    (its dotted path, '(top level)' for the whole document) and the line."""


def _quoted(path: str) -> str:
    return f"field '{path or '(top level)'}'"


class PlainLoader(yaml.SafeLoader):
    """A SafeLoader that keeps the path of the node it composes and refuses what Note
    [plain YAML] lists."""

    def __init__(self, stream: str | IO[str]) -> None:
        super().__init__(stream)
        self._path: list[str] = []  # 'links', '[0]', 'dst': where the composer is

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        segment = _segment(parent, index)
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent):
            raise PlainYamlError(f"{_quoted(self._where(segment))} (line {line}): YAML alias "
                                 f"'*{event.anchor}' refused ({REFUSED}); write the value out")
        if event.anchor is not None:
            raise PlainYamlError(f"{_quoted(self._where(segment))} (line {line}): YAML anchor "
                                 f"'&{event.anchor}' refused ({REFUSED}); write the value out")
        self._path.append(segment)
        if len(self._path) > MAX_DEPTH:
            raise PlainYamlError(f"line {line}: nested more than {MAX_DEPTH} levels deep "
                                 "(mappings and lists inside one another)")
        node = super().compose_node(parent, index)
        if isinstance(node, MappingNode):
            self._check_keys(node)
        self._path.pop()
        return node

    def _where(self, last: str = "") -> str:
        """The dotted path of the node being composed, then `last` inside it."""
        path = ""
        for segment in (*self._path, last):
            if segment:
                path += segment if segment.startswith("[") or not path else f".{segment}"
        return path

    def _check_keys(self, node: MappingNode) -> None:
        """Refuse a merge key, and a key that appears twice, in the mapping `node`."""
        first: dict[Any, ScalarNode] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                raise PlainYamlError(f"{_quoted(self._where('<<'))} (line {line}): YAML "
                                     f"merge key '<<' refused ({REFUSED}); write the keys out")
            if not isinstance(key_node, ScalarNode):
                continue  # a list or mapping as a key: the constructor refuses it
            key = self.construct_object(key_node)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:  # not hashable: the constructor refuses it too
                continue
            if earlier is not key_node:
                raise PlainYamlError(f"{_quoted(self._where(earlier.value))}: "
                                     f"{_twice(earlier, key_node)}; keep one")


def _twice(first: ScalarNode, second: ScalarNode) -> str:
    """'key 'steps' appears twice, at lines 3 and 5 (...)' for two nodes of the same key."""
    lines = (first.start_mark.line + 1, second.start_mark.line + 1)
    where = f"on line {lines[0]}" if lines[0] == lines[1] else f"at lines {lines[0]} and {lines[1]}"
    name = repr(first.value)
    if second.value != first.value:
        name += f" (written {second.value!r} the second time)"
    return f"key {name} appears twice, {where} (the second would replace the first)"


def _segment(parent: Node | None, index: Any) -> str:
    """The path segment of the node composed at `index` of `parent` (PyYAML passes the
    key node for a mapping's value, None for a key, the position for a list item)."""
    if isinstance(parent, SequenceNode):
        return f"[{index}]"
    if isinstance(index, ScalarNode):
        return index.value
    return ""  # the document itself, or a mapping's key


def load_plain(stream: str | IO[str]) -> Any:
    """The one document in `stream` as plain Python data; PlainYamlError for what Note
    [plain YAML] refuses, yaml.YAMLError for what does not parse."""
    return yaml.load(stream, Loader=PlainLoader)  # a SafeLoader: plain data, no objects
