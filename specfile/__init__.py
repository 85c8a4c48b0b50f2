"""Configuration files: read YAML or JSON, validate it into frozen dataclasses with pydantic,
and report every mistake in one format that names the file, the field and the value.

Scenario files (bench.net), sweep files (bench.harness) and run configs (aqsgd.train) all go
through it. It imports only pydantic, yaml and the standard library, and is a package of its
own because aqsgd may import nothing of bench and bench.net nothing of aqsgd.
"""

from specfile.errors import SpecError, Unit, describe
from specfile.load import SPEC_CONFIG, json_schema, raising, read_file, validate

__all__ = [
    "SPEC_CONFIG",
    "SpecError",
    "Unit",
    "describe",
    "json_schema",
    "raising",
    "read_file",
    "validate",
]
