"""Whether a data set fills a run's windows, checked before any process starts.

    from aqsgd.data.fit import count_tokens, fit_problem
    counts = count_tokens("pydoc", tok, cache_dir=".cache")   # tokens of each split
    fit_problem(counts, seq_len=1024, train=128, held_out=128)
    # "data set 'pydoc' gives 115 train windows of 1024 tokens, fewer than the 128 asked:
    #  ask at most 115 train and 6 held-out windows, or seq_len at most 917, or about ..."

The counts are what aqsgd.data.windows cuts: each document's tokens and an EOS, in one
stream per split (split files) or one stream whose every EVAL_STRIDE-th window is held
out (no split files), so the numbers here are the windows the worker will find.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aqsgd.data.sources import BUILTIN_DATASETS, split_documents
from aqsgd.data.tokenizer import Tokenizer
from aqsgd.data.windows import EVAL_STRIDE, _builtin_stream, _stream

__all__ = ["TokenCounts", "count_tokens", "fit_problem"]


@dataclass(frozen=True)
class TokenCounts:
    """Tokens of a data set's train and held-out streams; with `by_stride` one stream
    (`train_tokens`) holds both, every EVAL_STRIDE-th window held out."""

    name: str
    train_tokens: int
    eval_tokens: int
    by_stride: bool

    def windows(self, seq_len: int) -> tuple[int, int]:
        """(train, held-out) windows of `seq_len` tokens."""
        if self.by_stride:
            n = self.train_tokens // seq_len
            return n - n // EVAL_STRIDE, n // EVAL_STRIDE
        return self.train_tokens // seq_len, self.eval_tokens // seq_len

    def longest_fit(self, train: int, held_out: int) -> int:
        """The longest window (tokens, 0 if none) that gives `train` and `held_out`."""
        def fits(length: int) -> bool:
            have_train, have_eval = self.windows(length)
            return have_train >= train and have_eval >= held_out

        low, high = 0, max(self.train_tokens, self.eval_tokens)
        while low < high:  # fits() is monotone: longer windows, fewer of them
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return low


def count_tokens(name: str, tokenizer: Tokenizer, path: str | Path | None = None,
                 text_field: str = "text", cache_dir: str | Path | None = None) -> TokenCounts:
    """Tokens of data set `name`'s train and held-out streams (module docstring)."""
    if name in BUILTIN_DATASETS:
        stream = _builtin_stream(name, tokenizer, cache_dir and Path(cache_dir))
        return TokenCounts(name, stream.shape[0], 0, True)
    train, by_stride = split_documents(name, "train", path, text_field)
    if by_stride:
        return TokenCounts(name, _stream(train, tokenizer).shape[0], 0, True)
    held_out, _ = split_documents(name, "eval", path, text_field)
    return TokenCounts(name, _stream(train, tokenizer).shape[0],
                       _stream(held_out, tokenizer).shape[0], False)


def fit_problem(counts: TokenCounts, seq_len: int, train: int, held_out: int) -> str:
    """'' when `counts` give `train` and `held_out` windows of `seq_len` tokens, else
    what falls short and what would fit: fewer windows, shorter ones, or more text."""
    have_train, have_eval = counts.windows(seq_len)
    if have_train >= train and have_eval >= held_out:
        return ""
    short = [f"{have} {what} windows of {seq_len} tokens, fewer than the {want} asked"
             for have, want, what in ((have_train, train, "train"),
                                      (have_eval, held_out, "held-out"))
             if have < want]
    fits = [f"ask at most {have_train} train and {have_eval} held-out windows"]
    longest = counts.longest_fit(train, held_out)
    if longest >= 2:
        fits.append(f"seq_len at most {longest}")
    if counts.by_stride:
        more = max(train * seq_len * EVAL_STRIDE // (EVAL_STRIDE - 1),
                   held_out * EVAL_STRIDE * seq_len) - counts.train_tokens
        fits.append(f"about {more:,} more tokens of text")
    else:
        fits.append("more text in the split that falls short")
    return f"data set {counts.name!r} gives {' and '.join(short)}: {', or '.join(fits)}"
