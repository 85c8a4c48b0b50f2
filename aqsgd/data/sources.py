"""Documents: the text of each data set and split, before tokenization.

    from aqsgd.data.sources import split_documents
    docs, by_stride = split_documents("wikitext", "train", path="Salesforce/wikitext")

Data sets (DATASETS): `pydoc` (CPython's pydoc_data.topics, the fine-tuning task),
`stdlib` (the standard library's sources: pre-training and tokenizer text), and
`text` / `wikitext`, local files at `path` (a file, a directory of split files, or a
data set id found in the Hugging Face caches, aqsgd.data.hfcache), never downloaded:
plain text, JSON lines / JSON, parquet or Arrow. `by_stride` is True when the data set
has no split files and the windows are split by stride (aqsgd.data.windows). The
layouts read and how a split finds its file: docs/data.md.
"""

from __future__ import annotations

import json
import re
import sysconfig
from pathlib import Path
from typing import NamedTuple

from aqsgd.data.hfcache import resolve_text_source

__all__ = [
    "BUILTIN_DATASETS",
    "DATASETS",
    "FILE_SPLITS",
    "STDLIB_CHARS",
    "WIKITEXT_IDS",
    "SplitDocuments",
    "builtin_documents",
    "pydoc_documents",
    "read_documents",
    "split_documents",
    "stdlib_sources",
]

DATASETS = ("pydoc", "stdlib", "text", "wikitext")
BUILTIN_DATASETS = ("pydoc", "stdlib")  # text every CPython install has; no split files
FILE_SPLITS = ("validation", "test")  # only for data sets with split files
STDLIB_CHARS = 4_000_000  # pre-training text: about 2.2M tokens at a 384-token BPE
# Where `wikitext` with no path looks, in the hub cache and the `datasets` cache.
WIKITEXT_IDS = ("Salesforce/wikitext/wikitext-2-raw-v1", "wikitext/wikitext-2-raw-v1")

_TEXT_SUFFIXES = {".txt", ".raw", ".tokens", ""}
_JSON_SUFFIXES = {".jsonl", ".json"}
_ARROW_SUFFIXES = {".parquet", ".arrow"}
# `datasets` metadata that sits beside the data files.
_METADATA_FILES = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json"}
# File-name words that mark a split, in order of preference.
_VALIDATION_WORDS = ("validation", "valid", "val", "dev")
_SPLIT_WORDS = {
    "train": ("train",),
    "eval": (*_VALIDATION_WORDS, "eval", "test"),
    "validation": _VALIDATION_WORDS,
    "test": ("test",),
}


# ---------------------------------------------------------------- built-in text


def pydoc_documents() -> list[str]:
    """The pydoc topics (Python's reference-manual sections), in key order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


def stdlib_sources(max_chars: int, skip_chars: int = 0) -> list[str]:
    """Top-level `*.py` files of this Python's standard library, in name order,
    whole files only, from character `skip_chars` of that stream up to `max_chars`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    if not files:
        raise FileNotFoundError(f"no standard library sources (*.py) under {root}")
    docs, seen, total = [], 0, 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        seen += len(text)
        if seen <= skip_chars:
            continue
        if total + len(text) > max_chars and docs:
            break
        docs.append(text)
        total += len(text)
    return docs


def builtin_documents(name: str) -> list[str]:
    """All documents of a built-in data set (one of BUILTIN_DATASETS)."""
    if name not in BUILTIN_DATASETS:
        raise ValueError(f"built-in data set must be one of {BUILTIN_DATASETS}, got {name!r}")
    return pydoc_documents() if name == "pydoc" else stdlib_sources(STDLIB_CHARS)


# ---------------------------------------------------------------- one file


def read_documents(
    path: str | Path, text_field: str = "text", *, rows_are_lines: bool = False
) -> list[str]:
    """Documents of one local file. Plain text is one document. JSON lines, a JSON
    list, parquet and Arrow give one document per non-empty record (`text_field`, or
    the string itself for JSON); with `rows_are_lines` the records are the lines of one
    document (WikiText on the hub: one row per line, "" for a blank line)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in _ARROW_SUFFIXES:
        rows = _columnar_rows(path, text_field)
    elif suffix in _JSON_SUFFIXES:
        with open(path, encoding="utf-8") as handle:
            if suffix == ".jsonl":
                records = [json.loads(line) for line in handle if line.strip()]
            else:
                records = json.load(handle)
        if not isinstance(records, list):
            raise ValueError(
                f"{path}: expected a JSON list of records, got {type(records).__name__}"
            )
        rows = [_record_text(r, text_field, path, i) for i, r in enumerate(records)]
    else:
        return [path.read_text(encoding="utf-8")]
    if rows_are_lines:
        return ["".join(row or "\n" for row in rows)]
    return [row for row in rows if row]


def _record_text(record: object, text_field: str, path: Path, index: int) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict) and isinstance(record.get(text_field), str):
        return record[text_field]
    raise ValueError(f"{path}: record {index} has no string field {text_field!r}")


def _columnar_rows(path: Path, text_field: str) -> list[str | None]:
    """Column `text_field` of a parquet file or an Arrow IPC file/stream (None = null)."""
    import pyarrow as pa  # imported here: only file-backed data sets pay for it
    import pyarrow.ipc
    import pyarrow.parquet

    try:
        if path.suffix.lower() == ".parquet":
            schema = pyarrow.parquet.read_schema(path)
            _check_text_column(path, schema, text_field)
            table = pyarrow.parquet.read_table(path, columns=[text_field])
        else:
            with open(path, "rb") as handle:
                # The Arrow file format starts with this magic; `datasets` writes streams.
                is_file_format = handle.read(6) == b"ARROW1"
            opener = pyarrow.ipc.open_file if is_file_format else pyarrow.ipc.open_stream
            with pa.memory_map(str(path)) as source:
                reader = opener(source)
                _check_text_column(path, reader.schema, text_field)
                table = reader.read_all()
        return table.column(text_field).to_pylist()
    except pa.ArrowException as err:  # not parquet / not Arrow IPC, truncated, ...
        raise ValueError(f"{path}: not a readable {path.suffix} file ({err})") from err


def _check_text_column(path: Path, schema, text_field: str) -> None:
    import pyarrow as pa

    if text_field not in schema.names:
        raise ValueError(
            f"{path}: no column {text_field!r} (text_field); the columns are {schema.names}"
        )
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind)):  # fmt: skip
        raise ValueError(f"{path}: column {text_field!r} holds {kind}, not strings")


# ---------------------------------------------------------------- split files


def _data_files(directory: Path) -> list[Path]:
    """Readable data files under `directory`, sorted (`datasets` metadata left out)."""
    return [p for p in sorted(directory.rglob("*")) if _is_data_file(p)]


def _is_data_file(path: Path) -> bool:
    suffix = path.suffix.lower()
    known = _TEXT_SUFFIXES | _JSON_SUFFIXES | _ARROW_SUFFIXES
    if not path.is_file() or path.name.startswith(".") or suffix not in known:
        return False
    # `datasets` builds into "<hash>.incomplete" and renames it when done.
    return path.name not in _METADATA_FILES and not path.parent.name.endswith(".incomplete")


def _words(name: str) -> list[str]:
    return re.split(r"[.\-_]", name.lower())


def _split_files(directory: Path, split: str) -> list[Path]:
    """Files under `directory` whose name carries the split's preferred word; failing
    any name, whose folder under `directory` does (`<dir>/train/data-0.arrow`)."""
    files = _data_files(directory)
    folders = {p: [w for part in p.relative_to(directory).parent.parts for w in _words(part)]
               for p in files}  # fmt: skip
    for where in (lambda p: _words(p.name), folders.__getitem__):
        for word in _SPLIT_WORDS[split]:
            chosen = [p for p in files if word in where(p)]
            if chosen:
                _require_one_folder(directory, split, chosen)
                return chosen
    return []


def _require_one_folder(directory: Path, split: str, files: list[Path]) -> None:
    # Split files in several folders are several configs (wikitext-2 and wikitext-103)
    # or cached versions: concatenating them would be silently wrong.
    folders = sorted({str(p.parent.relative_to(directory)) for p in files})
    if len(folders) > 1:
        raise ValueError(
            f"{directory}: the {split!r} files lie in {len(folders)} folders {folders} "
            f"(several configs or cached versions); set the data path to one of them"
        )


def _text_source(name: str, path: str | Path | None) -> Path:
    if path is not None:
        return resolve_text_source(path)
    if name != "wikitext":
        raise ValueError(f"data set {name!r} needs a path (local file, directory or HF id)")
    errors = []
    for spec in WIKITEXT_IDS:
        try:
            return resolve_text_source(spec)
        except FileNotFoundError as err:
            errors.append(str(err))
    raise FileNotFoundError(
        f"data set 'wikitext' has no path and wikitext-2-raw-v1 is in no local Hugging Face "
        f"cache; set data.path to WikiText files. {' '.join(errors)}"
    )


class SplitDocuments(NamedTuple):
    """The documents of one split of a file-backed data set."""

    documents: list[str]
    # True when the source has no split files: `documents` are all of it, and the
    # caller holds out windows by stride (aqsgd.data.windows.split_windows).
    by_stride: bool


def split_documents(
    name: str, split: str, path: str | Path | None = None, text_field: str = "text"
) -> SplitDocuments:
    """Documents of split `split` (`train`, `eval`, or one of FILE_SPLITS) of the
    file-backed data set `name` (`text` or `wikitext`) at `path`."""
    source = _text_source(name, path)
    files = [source] if source.is_file() else _split_files(source, split)
    by_stride = source.is_file()  # one file: the windows are split by stride
    if not files:
        present = [p.name for s in _SPLIT_WORDS for p in _split_files(source, s)]
        if present:
            raise FileNotFoundError(
                f"{source}: no file for split {split!r} (names with {_SPLIT_WORDS[split]}); "
                f"split files there: {sorted(set(present))}"
            )
        files, by_stride = _data_files(source), True
        if not files:
            raise FileNotFoundError(f"{source}: no text, JSON, parquet or arrow files")
    if by_stride and split in FILE_SPLITS:
        raise ValueError(f"split {split!r} needs split files; {source} has none (use 'eval')")
    lines = name == "wikitext"
    docs = [doc for f in files for doc in read_documents(f, text_field, rows_are_lines=lines)]
    if not any(doc.strip() for doc in docs):
        raise ValueError(
            f"data set {name!r} split {split!r}: no text in {[str(f) for f in files]} "
            f"(records read from field/column {text_field!r})"
        )
    return SplitDocuments(docs, by_stride)
