"""Training data: fixed-length token windows with stable sample ids, and the
sampler that gives every rank the same ids.

    from aqsgd.data.windows import build_dataset
    from aqsgd.data.tokenizer import bpe_tokenizer
    tok = bpe_tokenizer(384, ".cache")
    train = build_dataset("pydoc", seq_len=64, tokenizer=tok, split="train")
    train.tokens            # (N, 64) int64; row i is sample id i, the same on every run

Data sets (`name`):
- `pydoc`: CPython's `pydoc_data.topics` (the fine-tuning task; offline everywhere).
- `stdlib`: the standard library's Python sources (pre-training text, aqsgd.model.pretrain).
- `text` / `wikitext`: local files at `path`, never downloaded. `path` is a file, a
  directory holding split files, or a data set id (`owner/name[/config]`) looked up
  in the Hugging Face caches (see `resolve_text_source`). Layouts read:
  - plain text (.txt, .raw, .tokens; WikiText's `wiki.train.raw` / `wiki.valid.raw`),
    JSON lines / JSON (records with a `text_field` string, or strings);
  - parquet, as in the hub's data set repos (`wikitext-2-raw-v1/train-00000-of-00001.parquet`),
    in a directory or in the hub cache (`hub/datasets--wikitext/snapshots/<rev>/...`);
  - Arrow IPC stream or file (.arrow), as the `datasets` library writes them, in its
    cache (`datasets/<name>/<config>/<version>/<hash>/<name>-train.arrow`) or by
    `save_to_disk` (`<dir>/train/data-00000-of-00001.arrow`).
  Parquet and Arrow rows are read from column `text_field` (default `text`).
  `wikitext` with no `path` looks for wikitext-2-raw-v1 in the caches.

Each document is tokenized, followed by EOS, and the stream is cut into
non-overlapping windows of seq_len tokens (the tail is dropped). A record (row) is
one document for `text`; for `wikitext` the rows are the lines of one text (as the
hub stores WikiText), so a split file is one document, as with `wiki.train.raw`, and
empty rows are blank lines. Split: a data set with split files uses the file whose
name (or, failing that, folder) carries the split's word (`eval` = validation, else
test; `validation` and `test` ask for one); otherwise every EVAL_STRIDE-th window is
held out for evaluation, so the train ids never depend on how many evaluation
windows a run asks for.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from aqsgd.data.tokenizer import Tokenizer, stdlib_sources, tokenizer_for
from aqsgd.filecache import default_cache_dir

__all__ = [
    "CHUNK_CHARS",
    "DATASETS",
    "EVAL_STRIDE",
    "FILE_SPLITS",
    "SPLITS",
    "WindowDataset",
    "WIKITEXT_IDS",
    "build_dataset",
    "hf_cache_dirs",
    "load_windows",
    "pydoc_documents",
    "read_documents",
    "resolve_text_source",
    "split_windows",
    "token_windows",
    "Sampler",
    "batch_ids",
]

DATASETS = ("pydoc", "stdlib", "text", "wikitext")
SPLITS = ("train", "eval")
EVAL_STRIDE = 20  # window i is held out when i % EVAL_STRIDE == EVAL_STRIDE - 1 (5%)
STDLIB_CHARS = 4_000_000  # pre-training text: about 2.2M tokens at a 384-token BPE
CHUNK_CHARS = 1 << 16  # longer documents are encoded in pieces of about this size
_SAFE_CUT = re.compile(r"(?<=\S) (?=\S)")  # a pre-token boundary of GPT-2's pattern

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
FILE_SPLITS = ("validation", "test")  # only for data sets with split files
# Where `wikitext` with no path looks, in the hub cache and the `datasets` cache.
WIKITEXT_IDS = ("Salesforce/wikitext/wikitext-2-raw-v1", "wikitext/wikitext-2-raw-v1")


@dataclass(frozen=True, eq=False)
class WindowDataset:
    """Token windows of one split. Sample id = row index of `tokens`."""

    name: str
    split: str
    tokens: torch.Tensor  # (N, seq_len) int64
    tokenizer: str  # the tokenizer's fingerprint

    def __post_init__(self) -> None:
        if self.tokens.dtype != torch.long or self.tokens.ndim != 2:
            raise ValueError(
                f"WindowDataset.tokens must be int64 (N, seq_len), "
                f"got {self.tokens.dtype} {tuple(self.tokens.shape)}"
            )

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, ids: torch.Tensor | Sequence[int] | int) -> torch.Tensor:
        return self.tokens[torch.as_tensor(ids, dtype=torch.long)]  # (..., seq_len)

    def fingerprint(self) -> str:
        """Hash of the token contents: two builds with equal fingerprints are equal."""
        return hashlib.sha256(self.tokens.numpy().tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------- documents


def pydoc_documents() -> list[str]:
    """The pydoc topics (Python's reference-manual sections), in key order."""
    from pydoc_data.topics import topics

    return [topics[key] for key in sorted(topics)]


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


def hf_cache_dirs() -> tuple[Path, Path]:
    """(hub cache, `datasets` cache) as the Hugging Face libraries find them, from the
    environment at call time: HF_HUB_CACHE, HF_DATASETS_CACHE, else under HF_HOME
    (default $XDG_CACHE_HOME/huggingface, ~/.cache/huggingface)."""
    env = os.environ
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = Path(env.get("HF_HOME") or cache / "huggingface").expanduser()
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or home / "hub"
    datasets = env.get("HF_DATASETS_CACHE") or home / "datasets"
    return Path(hub).expanduser(), Path(datasets).expanduser()


def _hub_snapshot(hub_cache: Path, repo: str) -> Path | None:
    """The snapshot folder of dataset `repo` in a hub cache: refs/main's revision, else
    the one revision any ref names, else the only snapshot."""
    root = hub_cache / ("datasets--" + repo.replace("/", "--"))
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        return None
    refs = root / "refs"
    main = refs / "main"
    named = [main] if main.is_file() else sorted(p for p in refs.rglob("*") if p.is_file())
    present = {p.name for p in snapshots.iterdir() if p.is_dir()}
    revisions = sorted({r.read_text().strip() for r in named} & present) or sorted(present)
    if len(revisions) > 1:
        raise ValueError(
            f"{root}: {len(revisions)} snapshots {revisions} and no ref names one; set the "
            f"data path to one of them"
        )
    return snapshots / revisions[0] if revisions else None


def resolve_text_source(
    spec: str | Path,
    hf_cache_dir: str | Path | None = None,
    datasets_cache_dir: str | Path | None = None,
) -> Path:
    """A local file or directory, or a data set id `owner/name[/subdir...]` (or
    `name[/subdir...]`) already cached, as a local path. Never downloads. Looked up in
    the hub cache (`datasets--owner--name/snapshots/<rev>/subdir`), then in the
    `datasets` cache (`owner___name/subdir`, `name/subdir`); the caches default to
    `hf_cache_dirs()`."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    default_hub, default_datasets = hf_cache_dirs()
    hub = Path(hf_cache_dir) if hf_cache_dir is not None else default_hub
    datasets = Path(datasets_cache_dir) if datasets_cache_dir is not None else default_datasets
    parts = [part for part in str(spec).split("/") if part]
    tried = []
    for cut in (2, 1):  # "owner/name[/subdir...]" or "name[/subdir...]"
        if len(parts) < cut:
            continue
        repo, sub = "/".join(parts[:cut]), parts[cut:]
        snapshot = _hub_snapshot(hub, repo)
        candidates = [snapshot.joinpath(*sub)] if snapshot is not None else []
        candidates.append(datasets.joinpath(repo.replace("/", "___"), *sub))
        for found in candidates:
            if found.exists():
                return found
            tried.append(str(found))
    raise FileNotFoundError(
        f"data source {str(spec)!r} is neither a local path nor a data set in the local "
        f"Hugging Face caches (downloads are disabled); tried {tried}"
    )


# ---------------------------------------------------------------- windows


def _pieces(doc: str, chunk_chars: int) -> list[str]:
    """`doc` cut about every `chunk_chars` characters, each cut just before a space that
    sits between two non-space characters. The byte-level BPE's pre-tokenizer (GPT-2's
    pattern, no prefix space) splits there anyway, so the pieces' ids, concatenated,
    are the ids of `doc`; the pieces encode in parallel where one long text would not."""
    pieces, start = [], 0
    while len(doc) - start > chunk_chars:
        cut = _SAFE_CUT.search(doc, start + chunk_chars)
        if cut is None:
            break
        pieces.append(doc[start : cut.start()])
        start = cut.start()
    pieces.append(doc[start:])
    return pieces


def _stream(
    docs: Sequence[str], tokenizer: Tokenizer, chunk_chars: int = CHUNK_CHARS
) -> torch.Tensor:
    pieces: list[str] = []
    doc_ends = set()  # index of each document's last piece
    for doc in docs:
        pieces.extend(_pieces(doc, chunk_chars))
        doc_ends.add(len(pieces) - 1)
    stream: list[int] = []
    for index, ids in enumerate(tokenizer.encode_batch(pieces)):
        stream.extend(ids)
        if index in doc_ends:
            stream.append(tokenizer.eos_id)
    return torch.tensor(stream, dtype=torch.long)  # (T,)


@functools.lru_cache(maxsize=4)
def _builtin_stream(name: str, tokenizer: Tokenizer) -> torch.Tensor:
    # Train and eval splits (and repeated builds in one process) tokenize once.
    docs = pydoc_documents() if name == "pydoc" else stdlib_sources(STDLIB_CHARS)
    return _stream(docs, tokenizer)


def _cut(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    n = stream.shape[0] // seq_len
    return stream[: n * seq_len].view(n, seq_len)  # (N, L)


def token_windows(docs: Sequence[str], tokenizer: Tokenizer, seq_len: int) -> torch.Tensor:
    """(N, seq_len) int64: the documents, each followed by EOS, cut into windows."""
    return _cut(_stream(docs, tokenizer), seq_len)


def split_windows(tokens: torch.Tensor, split: str) -> torch.Tensor:
    """The `split` rows of windows that have no split files: every EVAL_STRIDE-th
    window is `eval`, the rest `train`."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    held_out = torch.arange(tokens.shape[0]) % EVAL_STRIDE == EVAL_STRIDE - 1
    return tokens[held_out if split == "eval" else ~held_out]


def _split_tokens(name, split, seq_len, tokenizer, path, text_field) -> torch.Tensor:
    if name in ("pydoc", "stdlib"):
        if split in FILE_SPLITS:
            raise ValueError(f"split {split!r} needs split files; data set {name!r} has none")
        return split_windows(_cut(_builtin_stream(name, tokenizer), seq_len), split)
    source = _text_source(name, path)
    files = [source] if source.is_file() else _split_files(source, split)
    by_stride = source.is_file()  # one file: every EVAL_STRIDE-th window is eval
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
    tokens = token_windows(docs, tokenizer, seq_len)
    return split_windows(tokens, split) if by_stride else tokens


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


def build_dataset(
    name: str = "pydoc",
    *,
    seq_len: int,
    tokenizer: Tokenizer,
    split: str = "train",
    num_samples: int | None = None,
    path: str | Path | None = None,
    text_field: str = "text",
) -> WindowDataset:
    """Windows of `seq_len` tokens of one split; the first `num_samples` if given.
    `split` is one of SPLITS, or of FILE_SPLITS for a data set with split files."""
    if name not in DATASETS:
        raise ValueError(f"data set name must be one of {DATASETS}, got {name!r}")
    if split not in (*SPLITS, *FILE_SPLITS):
        raise ValueError(f"split must be one of {(*SPLITS, *FILE_SPLITS)}, got {split!r}")
    if not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"seq_len must be an int >= 2, got {seq_len!r}")
    tokens = _split_tokens(name, split, seq_len, tokenizer, path, text_field)
    if num_samples is not None:
        if not isinstance(num_samples, int) or num_samples < 0:
            raise ValueError(f"num_samples must be None or an int >= 0, got {num_samples!r}")
        if num_samples > tokens.shape[0]:
            raise ValueError(
                f"num_samples={num_samples} exceeds the {tokens.shape[0]} {split} windows "
                f"of {seq_len} tokens in data set {name!r}"
            )
        tokens = tokens[:num_samples]
    return WindowDataset(name, split, tokens.contiguous(), tokenizer.fingerprint)


def load_windows(
    data_cfg,
    model_cfg,
    seed: int | None = None,
    cache_dir: str | Path | None = None,
    tokenizer: Tokenizer | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(train (N, L), eval (E, L)) int64 windows for a run: `data_cfg` has `name`,
    `path`, `max_samples`, `eval_samples` and optionally `text_field` (default "text");
    `model_cfg` gives seq_len and the vocabulary.
    `seed` is accepted for the worker's call but unused: the split is fixed, so sample
    ids are the same whatever the seed. The tokenizer is cached under `cache_dir`."""
    del seed
    if tokenizer is None:
        tokenizer = tokenizer_for(model_cfg.vocab_size, cache_dir or default_cache_dir())
    common = dict(
        seq_len=model_cfg.seq_len,
        tokenizer=tokenizer,
        path=data_cfg.path,
        text_field=getattr(data_cfg, "text_field", "text"),  # DataConfig may not carry it
    )
    train = build_dataset(data_cfg.name, split="train", num_samples=data_cfg.max_samples, **common)
    evaluation = build_dataset(
        data_cfg.name, split="eval", num_samples=data_cfg.eval_samples, **common
    )
    return train.tokens, evaluation.tokens


# ---------------------------------------------------------------- sampler


@functools.lru_cache(maxsize=4)
def _permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=gen)  # (N,) int64


@dataclass(frozen=True)
class Sampler:
    """Sample ids per (step, micro-batch, replica), identical on every rank.

    Epoch e is a permutation of the N sample ids drawn from (seed, e). Each optimizer
    step takes the next num_replicas * num_micro_batches * micro_batch_size ids of it,
    laid out (replica, micro-batch, sample); an epoch's tail that does not fill a
    step is dropped. `step` is global (0, 1, ... across epochs).
    """

    num_samples: int
    micro_batch_size: int
    num_micro_batches: int
    seed: int
    num_replicas: int = 1

    def __post_init__(self) -> None:
        for name in ("num_samples", "micro_batch_size", "num_micro_batches", "num_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Sampler.{name} must be a positive int, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"Sampler.seed must be an int >= 0, got {self.seed!r}")
        if self.num_samples < self.samples_per_step:
            raise ValueError(
                f"Sampler.num_samples={self.num_samples} is fewer than the {self.samples_per_step} "
                f"samples of one step (replicas x micro-batches x micro-batch size)"
            )

    @property
    def samples_per_step(self) -> int:
        return self.num_replicas * self.num_micro_batches * self.micro_batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.samples_per_step

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def permutation(self, epoch: int) -> torch.Tensor:
        return _permutation(self.num_samples, self.seed, epoch).clone()

    def step_ids(self, step: int, replica: int = 0) -> torch.Tensor:
        """(num_micro_batches, micro_batch_size) int64 ids of `replica` at global `step`."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        if not 0 <= replica < self.num_replicas:
            raise ValueError(f"replica must be in [0, {self.num_replicas}), got {replica!r}")
        perm = _permutation(self.num_samples, self.seed, self.epoch_of(step))
        start = (step % self.steps_per_epoch) * self.samples_per_step
        shape = (self.num_replicas, self.num_micro_batches, self.micro_batch_size)
        return perm[start : start + self.samples_per_step].view(shape)[replica].clone()

    def micro_batch_ids(self, step: int, micro_batch: int, replica: int = 0) -> torch.Tensor:
        """(micro_batch_size,) int64 ids of one micro-batch."""
        if not 0 <= micro_batch < self.num_micro_batches:
            raise ValueError(
                f"micro_batch must be in [0, {self.num_micro_batches}), got {micro_batch!r}"
            )
        return self.step_ids(step, replica)[micro_batch]


def batch_ids(
    step: int,
    epoch: int,
    seed: int,
    *,
    num_samples: int,
    micro_batch_size: int,
    num_micro_batches: int = 1,
    micro_batch: int = 0,
    replica: int = 0,
    num_replicas: int = 1,
) -> torch.Tensor:
    """(micro_batch_size,) ids of micro-batch `micro_batch` of step `step` within
    `epoch` (a function form of Sampler for callers that count steps per epoch)."""
    sampler = Sampler(num_samples, micro_batch_size, num_micro_batches, seed, num_replicas)
    if not 0 <= step < sampler.steps_per_epoch:
        raise ValueError(
            f"step must be in [0, {sampler.steps_per_epoch}) within an epoch, got {step!r}"
        )
    return sampler.micro_batch_ids(epoch * sampler.steps_per_epoch + step, micro_batch, replica)
