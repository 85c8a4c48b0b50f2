"""A cell's meta.json as one typed record: the only reader of that file.

    record = read_record("results/100mbps/100mbps__fp32")   # None: never finished
    record.status, record.cell.mode, record.schedule         # 'ok', 'fp32', 'gpipe'
    record.placement.links[0].rate_mbit                       # 100.0
    records = load_records(["results/100mbps"])               # bench.results.files

The JSON is parsed once (read_json) and built into frozen dataclasses (parse_record); a
meta.json of another schema_version, or without a key a reader needs, is a SchemaError
naming the file and the key ('<path>: lacks cell.scenario (schema 5)'). Blocks the schema
lets be absent (`failure` of an ok cell, `run_config` of a cell that failed before its
config, `scenario` and `launcher` of a cell whose hosts never came up, the outage
`schedule` block) are None. The keys: docs/results-schema.md, "meta.json".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results.record_links import (
    LauncherRecord,
    LinkSchedule,
    OutageRecord,
    ScenarioRecord,
    parse_launcher,
    parse_outages,
    parse_scenario,
)
from bench.results.schema import SCHEMA_VERSION, Fields, ResultFileError, SchemaError

__all__ = ["CellBlock", "CellRecord", "Failure", "FileDigest", "Hardware", "Identity",
           "PipelineRecord", "PlacedLink", "PlacedRank", "PlacementRecord", "ProbeLink",
           "Provenance", "parse_record", "read_json", "read_record"]

_STR_OR_NONE = (str, type(None))
_INT_OR_NONE = (int, type(None))


@dataclass(frozen=True)
class CellBlock:
    """meta.json's `cell` block: what the cell is, flat (docs/results-schema.md, "The
    `cell` block"); the loader copies its CELL_KEYS onto every metrics row."""

    name: str
    spec_name: str
    sweep: str
    scenario: str
    mode: str
    label: str
    fw_bits: int | None
    bw_bits: int | None
    grad_mode: str
    preset: str
    stages: int
    replicas: int
    launcher: str
    shaped: bool
    shaping: str
    rate_mbit: float | None
    delay_ms: float | None
    host_limited: bool
    rate_mbit_achieved: float | None
    seed: int
    variant: str
    repeat: int
    dropout: float
    dropout_masks: str
    epochs: float
    steps_per_epoch: int
    warmup_epochs: int
    eval_windows: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_CELL_TYPES: dict[str, tuple[type, ...]] = {
    "fw_bits": _INT_OR_NONE, "bw_bits": _INT_OR_NONE, "stages": (int,), "replicas": (int,),
    "shaped": (bool,), "rate_mbit": (float, type(None)), "delay_ms": (float, type(None)),
    "host_limited": (bool,), "rate_mbit_achieved": (float, type(None)), "seed": (int,),
    "repeat": (int,), "dropout": (float,), "epochs": (float,), "steps_per_epoch": (int,),
    "warmup_epochs": (int,), "eval_windows": (int,)}


def _cell(f: Fields) -> CellBlock:
    return CellBlock(**{k.name: f.need(k.name, *_CELL_TYPES.get(k.name, (str,)))
                        for k in dataclasses.fields(CellBlock)})


@dataclass(frozen=True)
class Failure:
    """Why a cell failed: the first failing rank (None: before the workers started), its
    exit code, and its log's tail (None when no rank is known)."""

    rank: int | None
    returncode: int | None
    reason: str
    log_tail: str | None = None


@dataclass(frozen=True)
class Identity:
    """What a run must match to reuse the cell (bench.results.schema.IDENTITY_KEYS, the
    tokenizer's hash for a cell of tokenizer files, the `contents` of its paths);
    `mechanisms` and `paths` recorded only."""

    spec_key: str
    scenario_key: str | None
    launcher: Mapping[str, Any]
    machine: Mapping[str, Any]
    git_commit: str | None
    mechanisms: Mapping[str, str] | None
    tokenizer: str | None = None  # absent for the suite's own BPE
    # Note [identity by content]: the content digest of each workload setting that names a
    # file or folder, compared; and its resolved absolute path, recorded only. Both absent
    # (empty) when none does, and in cells recorded before them.
    contents: Mapping[str, str] = dataclasses.field(default_factory=dict)
    paths: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As meta.json has it: `tokenizer`, `contents` and `paths` only where recorded."""
        out = dataclasses.asdict(self)
        return {k: v for k, v in out.items()
                if k not in _IDENTITY_OPTIONAL or v not in (None, {})}


_IDENTITY_OPTIONAL = ("tokenizer", "contents", "paths")


@dataclass(frozen=True)
class Hardware:
    cpu_model: str | None
    cpu_cores: int | None
    memory_gib: float
    gpus: tuple[str, ...]


@dataclass(frozen=True)
class Provenance:
    """Where the run came from (bench.results.provenance)."""

    git_commit: str | None
    git_dirty: bool | None
    versions: Mapping[str, str | None]
    hardware: Hardware


@dataclass(frozen=True)
class PlacedRank:
    rank: int
    host: int
    stage: int
    replica: int
    machine: int | None = None  # only with several ranks per machine


@dataclass(frozen=True)
class PlacedLink:
    """A directed host link the cell used: what it carried, its payload rate (Mbit/s,
    None: unshaped), its one-way delay (ms), and with several ranks per machine its kind
    ('machine' or 'network')."""

    src: int
    dst: int
    traffic: tuple[str, ...]
    rate_mbit: float | None
    delay_ms: float
    kind: str | None = None


@dataclass(frozen=True)
class PlacementRecord:
    """meta.json's `placement` (bench.net.placement.Placement.to_dict())."""

    scenario: str
    stages: int
    replicas: int
    n_hosts: int
    ranks: tuple[PlacedRank, ...]
    links: tuple[PlacedLink, ...]
    ranks_per_machine: int = 1  # the machine keys only with several ranks per machine
    within_machine: str = "replicas"


@dataclass(frozen=True)
class ProbeLink:
    """One probed link (ProbeRecord.to_dict()); rates in Mbit/s, RTT in ms."""

    src: int
    dst: int
    rate_mbit_configured: float | None
    rate_mbit_achieved: float | None
    rate_mbit_ceiling: float | None
    host_limited: bool
    rtt_ms: float | None


@dataclass(frozen=True)
class PipelineRecord:
    """The resolved run config's `pipeline` section, as the readers use it."""

    schedule: str  # 'gpipe' or '1f1b'
    micro_batches: int


@dataclass(frozen=True)
class FileDigest:
    bytes: int
    sha256: str


@dataclass(frozen=True)
class CellRecord:
    """One cell's meta.json (module docstring); `path` the file, `cell_dir` its cell."""

    path: Path
    status: str  # 'ok' or 'failed'
    failure: Failure | None
    cell: CellBlock
    spec: Mapping[str, Any]  # the CellSpec as data (mode, workload, ...)
    spec_key: str
    identity: Identity
    placement: PlacementRecord
    probe: tuple[ProbeLink, ...]
    provenance: Provenance
    wall_s: float
    files: Mapping[str, FileDigest] | None  # only for an ok cell
    run_config: Mapping[str, Any] | None  # RunConfig.to_dict(); None: failed before it
    pipeline: PipelineRecord | None  # of run_config; never None for an ok cell
    scenario: ScenarioRecord | None  # None: the hosts never came up
    launcher: LauncherRecord | None  # None: the hosts never came up
    outages: OutageRecord | None  # meta.json's `schedule`: only for scheduled links

    @property
    def cell_dir(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.cell.name

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def schedule(self) -> str | None:
        """The pipeline schedule the cell ran ('gpipe', '1f1b'); None without a config."""
        return None if self.pipeline is None else self.pipeline.schedule

    @property
    def link_schedule(self) -> LinkSchedule | None:
        """The launcher's schedule block (links that change, flows, stragglers)."""
        return None if self.launcher is None else self.launcher.schedule


def _failure(f: Fields) -> Failure:
    return Failure(f.need("rank", *_INT_OR_NONE), f.need("returncode", *_INT_OR_NONE),
                   f.need("reason", str), f.maybe("log_tail", None, str))


def _identity(f: Fields) -> Identity:
    return Identity(f.need("spec_key", str), f.need("scenario_key", *_STR_OR_NONE),
                    f.need("launcher", dict), f.need("machine", dict),
                    f.need("git_commit", *_STR_OR_NONE), f.need("mechanisms", dict, type(None)),
                    f.maybe("tokenizer", None, str), _strings(f, "contents"),
                    _strings(f, "paths"))


def _strings(f: Fields, key: str) -> dict[str, str]:
    """The block `key` of setting -> text ({} where absent); SchemaError naming a value
    that is not a string."""
    block = f.block(key) if f.has(key) else Fields({}, f.path, f.name(key))
    return {name: block.need(name, str) for name in block.data}


def _provenance(f: Fields) -> Provenance:
    git, hw = f.block("git"), f.block("hardware")
    hardware = Hardware(hw.need("cpu_model", *_STR_OR_NONE), hw.need("cpu_cores", *_INT_OR_NONE),
                        hw.number("memory_gib"), tuple(hw.need("gpus", list)))
    return Provenance(git.need("commit", *_STR_OR_NONE), git.need("dirty", bool, type(None)),
                      f.need("versions", dict), hardware)


def _placement(f: Fields) -> PlacementRecord:
    ranks = tuple(PlacedRank(r.need("rank", int), r.need("host", int), r.need("stage", int),
                             r.need("replica", int), r.maybe("machine", None, int))
                  for r in f.blocks("ranks"))
    links = tuple(PlacedLink(k.need("src", int), k.need("dst", int),
                             tuple(k.need("traffic", list)), k.number_or_none("rate_mbit"),
                             k.number("delay_ms"), k.maybe("kind", None, str))
                  for k in f.blocks("links"))
    return PlacementRecord(f.need("scenario", str), f.need("stages", int),
                           f.need("replicas", int), f.need("n_hosts", int), ranks, links,
                           f.maybe("ranks_per_machine", 1, int),
                           f.maybe("within_machine", "replicas", str))


def _probe(f: Fields) -> ProbeLink:
    return ProbeLink(f.need("src", int), f.need("dst", int),
                     f.number_or_none("rate_mbit_configured"),
                     f.number_or_none("rate_mbit_achieved"),
                     f.number_or_none("rate_mbit_ceiling"), f.need("host_limited", bool),
                     f.number_or_none("rtt_ms"))


def _pipeline(f: Fields) -> PipelineRecord:
    return PipelineRecord(f.need("schedule", str), f.need("num_micro_batches", int))


def _optional(f: Fields, key: str, parse):
    """parse(f.block(key)), or None where the key is absent or null."""
    return None if f.maybe(key, None) is None else parse(f.block(key))


def parse_record(meta: Any, path: Path) -> CellRecord:
    """The record of the parsed meta.json `meta` read from `path`: SchemaError naming
    `path` for another schema_version or a key missing or of another type."""
    if not isinstance(meta, dict):
        raise ResultFileError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    f = Fields(meta, path)
    version = f.maybe("schema_version", None)
    if version != SCHEMA_VERSION:
        raise SchemaError(f"{path}: schema_version {version!r}, this suite reads schema "
                          f"{SCHEMA_VERSION} only (docs/results-schema.md); rerun the "
                          f"sweep that wrote it to measure it again")
    files = None if not f.has("files") else {
        name: FileDigest(d.need("bytes", int), d.need("sha256", str))
        for name, d in ((n, f.block("files").block(n)) for n in f.need("files", dict))}
    status = f.need("status", str)
    # every cell that ran has its config; one that failed before it was built has none
    run_config = f.need("run_config", dict) if status == "ok" else \
        f.maybe("run_config", None, dict)
    return CellRecord(
        path=path, status=status, failure=_optional(f, "failure", _failure),
        cell=_cell(f.block("cell")), spec=f.need("spec", dict), spec_key=f.need("spec_key", str),
        identity=_identity(f.block("identity")), placement=_placement(f.block("placement")),
        probe=tuple(_probe(p) for p in f.blocks("probe")),
        provenance=_provenance(f.block("provenance")), wall_s=f.number("wall_s"),
        files=files, run_config=run_config,
        pipeline=None if run_config is None else _pipeline(f.block("run_config")
                                                            .block("pipeline")),
        scenario=_optional(f, "scenario", parse_scenario),
        launcher=_optional(f, "launcher", parse_launcher),
        outages=_optional(f, "schedule", parse_outages))


def read_json(cell_dir: str | Path) -> Any | None:
    """The parsed meta.json of `cell_dir` (None: no such file, the cell never finished);
    ResultFileError naming the file when it is not JSON (truncated, corrupt)."""
    path = Path(cell_dir) / "meta.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"{path}: not a JSON file ({err}); truncated or corrupt") from None


def read_record(cell_dir: str | Path) -> CellRecord | None:
    """The record of the cell in `cell_dir`, None when it never finished (no meta.json);
    ResultFileError naming the file when it cannot be read, SchemaError when it is of
    another schema or lacks a key (named)."""
    meta = read_json(cell_dir)
    return None if meta is None else parse_record(meta, Path(cell_dir) / "meta.json")
