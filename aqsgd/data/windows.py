"""Token windows: fixed-length rows of token ids with stable sample ids.

    from aqsgd.data.windows import build_dataset
    from aqsgd.data.tokenizer import bpe_tokenizer
    tok = bpe_tokenizer(384, ".cache")
    train = build_dataset("pydoc", seq_len=64, tokenizer=tok, split="train")
    train.tokens            # (N, 64) int64; row i is sample id i, the same on every run

Each document (aqsgd.data.sources) is tokenized, followed by EOS, and the stream is
cut into non-overlapping windows of seq_len tokens (the tail is dropped). A data set
with split files cuts each split's documents; otherwise every EVAL_STRIDE-th window
is held out for evaluation, so the train ids never depend on how many evaluation
windows a run asks for.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from aqsgd.data.sources import (
    BUILTIN_DATASETS,
    DATASETS,
    FILE_SPLITS,
    builtin_documents,
    split_documents,
)
from aqsgd.data.tokenizer import Tokenizer, tokenizer_for
from aqsgd.filecache import build_once, default_cache_dir

__all__ = [
    "CHUNK_CHARS",
    "EVAL_STRIDE",
    "SPLITS",
    "DataSpec",
    "ModelShape",
    "WindowDataset",
    "build_dataset",
    "load_windows",
    "split_windows",
    "token_windows",
]

SPLITS = ("train", "eval")
EVAL_STRIDE = 20  # window i is held out when i % EVAL_STRIDE == EVAL_STRIDE - 1 (5%)
CHUNK_CHARS = 1 << 16  # longer documents are encoded in pieces of about this size
_SAFE_CUT = re.compile(r"(?<=\S) (?=\S)")  # a pre-token boundary of GPT-2's pattern


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


# ---------------------------------------------------------------- tokens


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
def _builtin_stream(name: str, tokenizer: Tokenizer, cache_dir: Path | None) -> torch.Tensor:
    # Train and eval splits (and repeated builds in one process) tokenize once; with a
    # cache_dir, every later process reads the ids (keyed by the documents' and the
    # tokenizer's hashes) instead of tokenizing again, about a second of a worker's start.
    docs = builtin_documents(name)
    if cache_dir is None:
        return _stream(docs, tokenizer)
    digest = hashlib.sha256("\0".join(docs).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "tokens" / f"{name}-{tokenizer.fingerprint}-{digest}.pt"
    build_once(path, lambda tmp: torch.save(_stream(docs, tokenizer), tmp))
    return torch.load(path, weights_only=True)


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


def _split_tokens(name, split, seq_len, tokenizer, path, text_field, cache_dir) -> torch.Tensor:
    if name in BUILTIN_DATASETS:
        if split in FILE_SPLITS:
            raise ValueError(f"split {split!r} needs split files; data set {name!r} has none")
        stream = _builtin_stream(name, tokenizer, cache_dir and Path(cache_dir))
        return split_windows(_cut(stream, seq_len), split)
    docs, by_stride = split_documents(name, split, path, text_field)
    tokens = token_windows(docs, tokenizer, seq_len)
    return split_windows(tokens, split) if by_stride else tokens


# ---------------------------------------------------------------- data sets


def build_dataset(
    name: str = "pydoc",
    *,
    seq_len: int,
    tokenizer: Tokenizer,
    split: str = "train",
    num_samples: int | None = None,
    path: str | Path | None = None,
    text_field: str = "text",
    cache_dir: str | Path | None = None,
) -> WindowDataset:
    """Windows of `seq_len` tokens of one split; the first `num_samples` if given. With a
    `cache_dir`, a built-in data set's token ids are cached there once for every process.
    `name` is one of aqsgd.data.sources.DATASETS; `split` one of SPLITS, or of
    FILE_SPLITS for a data set with split files."""
    if name not in DATASETS:
        raise ValueError(f"data set name must be one of {DATASETS}, got {name!r}")
    if split not in (*SPLITS, *FILE_SPLITS):
        raise ValueError(f"split must be one of {(*SPLITS, *FILE_SPLITS)}, got {split!r}")
    if not isinstance(seq_len, int) or seq_len < 2:
        raise ValueError(f"seq_len must be an int >= 2, got {seq_len!r}")
    tokens = _split_tokens(name, split, seq_len, tokenizer, path, text_field, cache_dir)
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


class DataSpec(Protocol):
    """What `load_windows` reads of a run's data section (aqsgd.train.config.DataConfig)."""

    name: str
    path: str | None
    max_samples: int | None
    eval_samples: int
    text_field: str


class ModelShape(Protocol):
    """What `load_windows` reads of a model configuration (aqsgd.model.config.ModelConfig)."""

    seq_len: int
    vocab_size: int


def load_windows(
    data_cfg: DataSpec,
    model_cfg: ModelShape,
    cache_dir: str | Path | None = None,
    tokenizer: Tokenizer | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(train (N, L), eval (E, L)) int64 windows for a run: the first
    `data_cfg.max_samples` train windows (all if None) and the first
    `data_cfg.eval_samples` eval windows of length `model_cfg.seq_len`. The split is
    fixed, so sample ids do not depend on the run's seed. The tokenizer (for
    `model_cfg.vocab_size`) is cached under `cache_dir`."""
    cache_dir = cache_dir or default_cache_dir()
    if tokenizer is None:
        tokenizer = tokenizer_for(model_cfg.vocab_size, cache_dir)
    common = dict(
        seq_len=model_cfg.seq_len, tokenizer=tokenizer, path=data_cfg.path,
        text_field=data_cfg.text_field, cache_dir=cache_dir,
    )  # fmt: skip
    train = build_dataset(data_cfg.name, split="train", num_samples=data_cfg.max_samples, **common)
    evaluation = build_dataset(
        data_cfg.name, split="eval", num_samples=data_cfg.eval_samples, **common
    )
    return train.tokens, evaluation.tokens
