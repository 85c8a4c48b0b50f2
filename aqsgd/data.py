"""Training data: fixed-length token windows with stable sample ids, and the
sampler that gives every rank the same ids.

    from aqsgd.data import build_dataset
    from aqsgd.tokenizer import bpe_tokenizer
    tok = bpe_tokenizer(384, ".cache")
    train = build_dataset("pydoc", seq_len=64, tokenizer=tok, split="train")
    train.tokens            # (N, 64) int64; row i is sample id i, the same on every run

Data sets (`name`):
- `pydoc`: CPython's `pydoc_data.topics` (the fine-tuning task; offline everywhere).
- `stdlib`: the standard library's Python sources (pre-training text, aqsgd.pretrain).
- `text` / `wikitext`: local files at `path`: a file, or a directory holding split
  files (WikiText's `wiki.train.raw` / `wiki.valid.raw`, `train.jsonl`, ...), or a
  data set id already in the Hugging Face hub cache (`Salesforce/wikitext` or
  `Salesforce/wikitext/wikitext-2-raw-v1`). Plain text (.txt, .raw, .tokens) and
  JSON lines / JSON (`text` field) are read; parquet and arrow need pyarrow, which
  this suite does not install, so they raise with a hint to convert.

Each document is tokenized, followed by EOS, and the stream is cut into
non-overlapping windows of seq_len tokens (the tail is dropped). Split: a data
set with split files uses them (`eval` = validation, else test); otherwise every
EVAL_STRIDE-th window is held out for evaluation, so the train ids never depend on
how many evaluation windows a run asks for.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from aqsgd.filecache import default_cache_dir
from aqsgd.tokenizer import Tokenizer, stdlib_sources, tokenizer_for

__all__ = [
    "DATASETS",
    "EVAL_STRIDE",
    "SPLITS",
    "WindowDataset",
    "build_dataset",
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

_TEXT_SUFFIXES = {".txt", ".raw", ".tokens", ""}
_JSON_SUFFIXES = {".jsonl", ".json"}
_ARROW_SUFFIXES = {".parquet", ".arrow"}
# File-name words that mark a split, in order of preference.
_SPLIT_WORDS = {"train": ("train",), "eval": ("validation", "valid", "val", "dev", "eval", "test")}


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


def read_documents(path: str | Path, text_field: str = "text") -> list[str]:
    """Documents of one local file: plain text is one document; JSON lines and a
    JSON list give one document per record (`text_field`, or the string itself)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in _ARROW_SUFFIXES:
        raise ValueError(
            f"{path}: {suffix} files need pyarrow, which is not installed; convert the "
            f"split to JSON lines (one {{{text_field!r}: ...}} per line) or plain text"
        )
    if suffix in _JSON_SUFFIXES:
        with open(path, encoding="utf-8") as handle:
            if suffix == ".jsonl":
                records = [json.loads(line) for line in handle if line.strip()]
            else:
                records = json.load(handle)
        if not isinstance(records, list):
            raise ValueError(
                f"{path}: expected a JSON list of records, got {type(records).__name__}"
            )
        return [_record_text(r, text_field, path, i) for i, r in enumerate(records)]
    return [path.read_text(encoding="utf-8")]


def _record_text(record: object, text_field: str, path: Path, index: int) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict) and isinstance(record.get(text_field), str):
        return record[text_field]
    raise ValueError(f"{path}: record {index} has no string field {text_field!r}")


def _supported(path: Path) -> bool:
    suffix = path.suffix.lower()
    known = _TEXT_SUFFIXES | _JSON_SUFFIXES | _ARROW_SUFFIXES
    return path.is_file() and not path.name.startswith(".") and suffix in known


def _split_files(directory: Path, split: str) -> list[Path]:
    """Files under `directory` whose name carries the split's preferred word."""
    files = [p for p in sorted(directory.rglob("*")) if _supported(p)]
    for word in _SPLIT_WORDS[split]:
        chosen = [p for p in files if word in re.split(r"[.\-_]", p.name.lower())]
        if chosen:
            return chosen
    return []


def resolve_text_source(spec: str | Path, hf_cache_dir: str | Path | None = None) -> Path:
    """A local file or directory, or a data set id (optionally /subdir) already in
    the Hugging Face hub cache, as a local path. Never downloads."""
    path = Path(spec)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download

    parts = str(spec).strip("/").split("/")
    tried = []
    for cut in (2, 1):  # "owner/name[/subdir...]" or "name[/subdir...]"
        repo, sub = "/".join(parts[:cut]), parts[cut:]
        if len(parts) < cut:
            continue
        try:
            root = snapshot_download(repo, repo_type="dataset", local_files_only=True,
                                     cache_dir=hf_cache_dir)  # fmt: skip
        except (OSError, ValueError) as err:  # not cached / not a valid repo id
            tried.append(f"{repo}: {type(err).__name__}")
            continue
        found = Path(root).joinpath(*sub)
        if found.exists():
            return found
        tried.append(f"{repo}: no {'/'.join(sub)} in the snapshot")
    raise FileNotFoundError(
        f"data source {str(spec)!r} is neither a local path nor a data set in the local "
        f"Hugging Face cache (downloads are disabled); tried {tried}"
    )


# ---------------------------------------------------------------- windows


def _stream(docs: Sequence[str], tokenizer: Tokenizer) -> torch.Tensor:
    stream: list[int] = []
    for ids in tokenizer.encode_batch(docs):
        stream.extend(ids)
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
        return split_windows(_cut(_builtin_stream(name, tokenizer), seq_len), split)
    if path is None:
        raise ValueError(f"data set {name!r} needs a path (local file, directory or HF id)")
    source = resolve_text_source(path)
    if source.is_file():
        return split_windows(
            token_windows(read_documents(source, text_field), tokenizer, seq_len), split
        )
    files = _split_files(source, split)
    if not files:
        if _split_files(source, "train"):
            raise FileNotFoundError(f"{source}: no file for split {split!r}")
        files = [p for p in sorted(source.rglob("*")) if _supported(p)]
        if not files:
            raise FileNotFoundError(f"{source}: no text, JSON or JSON-lines files")
        docs = [doc for f in files for doc in read_documents(f, text_field)]
        return split_windows(token_windows(docs, tokenizer, seq_len), split)
    docs = [doc for f in files for doc in read_documents(f, text_field)]
    return token_windows(docs, tokenizer, seq_len)


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
    """Windows of `seq_len` tokens of one split; the first `num_samples` if given."""
    if name not in DATASETS:
        raise ValueError(f"data set name must be one of {DATASETS}, got {name!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
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
    `path`, `max_samples`, `eval_samples`; `model_cfg` gives seq_len and the vocabulary.
    `seed` is accepted for the worker's call but unused: the split is fixed, so sample
    ids are the same whatever the seed. The tokenizer is cached under `cache_dir`."""
    del seed
    if tokenizer is None:
        tokenizer = tokenizer_for(model_cfg.vocab_size, cache_dir or default_cache_dir())
    common = dict(seq_len=model_cfg.seq_len, tokenizer=tokenizer, path=data_cfg.path)
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
