"""The version and keys of meta.json, the errors its readers raise, and `Fields`, the one
way a reader takes a key from the parsed JSON.

    fields = Fields(json_object, path)                # a meta.json as parsed
    status = fields.need("status", str)               # 'ok'; or ResultFileError naming it
    cell = fields.block("cell")                       # Fields of meta.json's `cell` block
    cell.need("stages", int)                          # '<path>: lacks cell.stages (schema 5)'

Typed records are built from Fields (bench.results.record); nothing else reads the JSON.
The schema itself: docs/results-schema.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "CELL_KEYS", "IDENTITY_KEYS", "BYTE_KINDS", "Fields",
           "ResultFileError", "ResultFileWarning", "SchemaError"]

# 2: the `cell` block names the seed, the variant, dropout and its masks, the epochs and
# the held-out windows of an evaluation (CELL_KEYS); reports read those keys directly.
# 3: meta.json has `placement` (bench.net.placement.Placement.to_dict(): which rank ran
# on which host, the links each used and what they carried).
# 4: the `cell` block names the `repeat` of a repeated cell; train and eval records (and
# metrics.csv) carry `end_unix`, the wall clock at the end of the step.
# 5: meta.json has `identity` (IDENTITY_KEYS and the mechanisms the launcher used), the
# `cell` block `spec_name` and `shaping`, and `name` carries the launcher's tag.
# 6: every record (and metrics.csv) carries `peak_rss_bytes`, the rank's peak resident
# memory so far.
SCHEMA_VERSION = 6
# What a run must share with a finished cell to reuse it (meta.json `identity`; the
# harness builds them, bench.harness.meta.expected_identity, Note [cell identity] there).
IDENTITY_KEYS = ("spec_key", "scenario_key", "launcher", "machine", "git_commit")
BYTE_KINDS = ("activation", "gradient", "dp")
# Keys of meta.json's `cell` block that every schema-5 cell has and the loader copies
# onto every metrics row (with `status`).
CELL_KEYS = ("sweep", "spec_name", "scenario", "mode", "label", "fw_bits", "bw_bits",
             "grad_mode", "preset", "stages", "replicas", "launcher", "shaped", "shaping",
             "rate_mbit", "delay_ms",
             "host_limited", "rate_mbit_achieved", "seed", "variant", "dropout",
             "dropout_masks", "epochs", "steps_per_epoch", "warmup_epochs", "eval_windows")


class ResultFileError(ValueError):
    """A result file that cannot be read (truncated, not JSON, columns missing, a key
    missing): the message names the path and what is wrong."""


class SchemaError(ResultFileError):
    """A meta.json this suite cannot read: another schema version, or a key it needs
    missing or of another type. The loaders raise it (a cell of another schema is no
    damaged file to skip: its sweep is rerun); reuse_refusal says it."""


class ResultFileWarning(UserWarning):
    """A cell the loaders skipped because a file of it cannot be read (ResultFileError's
    message, and that its cell is measured again by the next run of its sweep)."""


_NUMBER = (int, float)


def _kind_text(kinds: tuple[type, ...]) -> str:
    names = ["number" if k is float else "null" if k is type(None) else k.__name__
             for k in kinds if not (k is int and float in kinds)]
    return " or ".join(names)


class Fields:
    """One JSON object of a result file, `where` its dotted place in it ('' for the whole
    file): `need` a key (absent: SchemaError '<path>: lacks cell.stages (schema 5)'), of
    the given types (float also takes an int, never a bool); `maybe` a key the schema
    lets be absent, with the default it stands for."""

    def __init__(self, data: Mapping[str, Any], path: Path, where: str = ""):
        self.data, self.path, self.where = data, path, where

    def name(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.where}[{key}]"
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return key in self.data

    def _typed(self, key: str, value: Any, kinds: tuple[type, ...]) -> Any:
        if not kinds:
            return value
        if float in kinds:
            kinds = (*kinds, int)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise SchemaError(f"{self.path}: {self.name(key)} is {value!r:.60}, expected "
                              f"{_kind_text(kinds)} (schema {SCHEMA_VERSION})")
        # an int where a number is asked for reads as a float (JSON writes 100.0 as 100)
        return float(value) if float in kinds and type(value) is int else value

    def need(self, key: str, *kinds: type) -> Any:
        """The value of `key`, of one of `kinds` (none given: any)."""
        if key not in self.data:
            raise SchemaError(f"{self.path}: lacks {self.name(key)} (schema {SCHEMA_VERSION})")
        return self._typed(key, self.data[key], kinds)

    def maybe(self, key: str, default: Any, *kinds: type) -> Any:
        """The value of `key`, or `default` where the schema lets it be absent."""
        return self._typed(key, self.data[key], kinds) if key in self.data else default

    def block(self, key: str) -> Fields:
        """The JSON object under `key`."""
        return Fields(self.need(key, dict), self.path, self.name(key))

    def blocks(self, key: str) -> list[Fields]:
        """The JSON objects of the list under `key`."""
        items = self.need(key, list)
        where = Fields({}, self.path, self.name(key))
        return [Fields(where._typed(k, item, (dict,)), self.path, where.name(k))
                for k, item in enumerate(items)]

    def number(self, key: str) -> float:
        return self.need(key, float)

    def number_or_none(self, key: str) -> float | None:
        return self.need(key, float, type(None))
