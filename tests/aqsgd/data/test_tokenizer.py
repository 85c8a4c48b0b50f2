"""Tokenizers (aqsgd.data.tokenizer): the small BPE cached and reused, and GPT-2's files
read directly or from the Hugging Face cache layout."""

import pytest
from data_helpers import VOCAB
from transformers import GPT2Tokenizer

from aqsgd.data.tokenizer import (
    EOS_TOKEN,
    bpe_tokenizer,
    cached_gpt2_files,
    gpt2_tokenizer,
    tokenizer_for,
)


def test_bpe_is_cached_and_reused(cache_dir, tok):
    files = list((cache_dir / "tokenizers").glob("bpe-300-*.json"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    again = bpe_tokenizer(VOCAB, cache_dir, corpus_chars=200_000)
    assert files[0].stat().st_mtime_ns == mtime  # read, not rebuilt
    assert again.fingerprint == tok.fingerprint
    assert tok.vocab_size == VOCAB
    assert tok.encode(EOS_TOKEN) == [tok.eos_id]
    text = "def f(x):\n    return x  # héllo, wörld\n"
    assert tok.decode(tok.encode(text)) == text  # byte-level: lossless


def test_bpe_vocab_error(cache_dir):
    with pytest.raises(ValueError, match="vocab_size must be an int >= 257, got 100"):
        bpe_tokenizer(100, cache_dir)


def test_gpt2_files_load_like_transformers(tmp_path, tok):
    tok.backend.model.save(str(tmp_path))  # writes vocab.json and merges.txt, GPT-2's format
    ours = gpt2_tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    theirs = GPT2Tokenizer(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    text = "class A:\n    pass\n\n  two  spaces and ünïcode"
    assert ours.encode(text) == theirs(text)["input_ids"] == tok.encode(text)
    with pytest.raises(FileNotFoundError, match="merges file not found"):
        gpt2_tokenizer(tmp_path / "vocab.json", tmp_path / "missing.txt")


def test_gpt2_files_found_in_hf_cache_layout(tmp_path, tok):
    snapshot = tmp_path / "models--openai-community--gpt2" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    tok.backend.model.save(str(snapshot))
    (tmp_path / "models--openai-community--gpt2" / "refs").mkdir()
    (tmp_path / "models--openai-community--gpt2" / "refs" / "main").write_text("abc123")
    assert cached_gpt2_files(tmp_path) == (snapshot / "vocab.json", snapshot / "merges.txt")
    assert cached_gpt2_files(tmp_path / "empty") is None
    # A big model vocabulary takes GPT-2's files from the cache.
    chosen = tokenizer_for(50257, tmp_path, hf_cache_dir=tmp_path)
    assert chosen.name.startswith("gpt2-bpe") and chosen.vocab_size == VOCAB
