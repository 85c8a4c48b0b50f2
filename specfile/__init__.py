"""Configuration files: read YAML or JSON, validate it into frozen dataclasses with pydantic,
and report every mistake in one format that names the file, the field and the value.

Scenario files (bench.net), sweep files (bench.harness), run configs (aqsgd.train) and
profiles (bench.perfmodel) are validated through it, the claims file (bench.report.claims)
is read through it, and so every one of them through one YAML loader that refuses
anchors, aliases, merge keys and a key written twice (specfile.plainyaml, Note [plain
YAML]). It imports only pydantic, yaml and the standard library, and is a package of its
own because aqsgd may import nothing of bench and bench.net nothing of aqsgd.
"""

from specfile.declared import (
    Default,
    add_flags,
    bound,
    check_fields,
    declaration,
    declared_default,
    description,
    flag_fields,
    or_none,
    setting,
)
from specfile.errors import SpecError, Unit, describe
from specfile.load import MAX_FILE_BYTES, SPEC_CONFIG, json_schema, raising, read_file, validate

__all__ = [
    "Default",
    "add_flags",
    "declaration",
    "declared_default",
    "or_none",
    "setting",
    "bound",
    "check_fields",
    "description",
    "flag_fields",
    "MAX_FILE_BYTES",
    "SPEC_CONFIG",
    "SpecError",
    "Unit",
    "describe",
    "json_schema",
    "raising",
    "read_file",
    "validate",
]
