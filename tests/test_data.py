"""Tokenizer cache, token windows with stable ids, local text loaders, the sampler."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Tokenizer

from aqsgd.data import (
    EVAL_STRIDE,
    Sampler,
    batch_ids,
    build_dataset,
    load_windows,
    pydoc_documents,
    read_documents,
    resolve_text_source,
)
from aqsgd.model import PRESETS
from aqsgd.tokenizer import (
    EOS_TOKEN,
    bpe_tokenizer,
    cached_gpt2_files,
    gpt2_tokenizer,
    tokenizer_for,
)

VOCAB = 300  # small BPE: trains in well under a second


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def tok(cache_dir):
    return bpe_tokenizer(VOCAB, cache_dir, corpus_chars=200_000)


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


@pytest.mark.timeout(30)
def test_pydoc_windows_stable_and_split(tok):
    a = build_dataset("pydoc", seq_len=32, tokenizer=tok)
    b = build_dataset("pydoc", seq_len=32, tokenizer=tok)
    ev = build_dataset("pydoc", seq_len=32, tokenizer=tok, split="eval")
    assert a.tokens.dtype == torch.long and a.tokens.shape[1] == 32
    assert torch.equal(a.tokens, b.tokens) and a.fingerprint() == b.fingerprint()
    assert a.tokens.max() < VOCAB and a.tokenizer == tok.fingerprint
    # Every document then EOS, cut in windows; every EVAL_STRIDE-th window held out.
    stream = [i for ids in tok.encode_batch(pydoc_documents()) for i in ids + [tok.eos_id]]
    n = len(stream) // 32
    windows = torch.tensor(stream[: n * 32]).view(n, 32)
    held_out = torch.arange(n) % EVAL_STRIDE == EVAL_STRIDE - 1
    assert torch.equal(a.tokens, windows[~held_out]) and torch.equal(ev.tokens, windows[held_out])
    # num_samples keeps the first rows: sample ids do not move.
    small = build_dataset("pydoc", seq_len=32, tokenizer=tok, num_samples=10)
    assert torch.equal(small.tokens, a.tokens[:10])
    assert torch.equal(small[[3, 1]], a.tokens[[3, 1]])
    with pytest.raises(ValueError, match=r"num_samples=100000 exceeds the \d+ train windows"):
        build_dataset("pydoc", seq_len=32, tokenizer=tok, num_samples=100_000)


def test_build_dataset_errors(tok):
    with pytest.raises(ValueError, match="data set name must be one of"):
        build_dataset("nope", seq_len=8, tokenizer=tok)
    with pytest.raises(ValueError, match="split must be one of"):
        build_dataset("pydoc", seq_len=8, tokenizer=tok, split="test")
    with pytest.raises(ValueError, match="needs a path"):
        build_dataset("text", seq_len=8, tokenizer=tok)


def _write_wikitext(root: Path) -> dict[str, str]:
    texts = {
        "train": " = Valkyria Chronicles = \n\n Senjō no Valkyria is a tactical game . \n" * 40,
        "valid": " = Tower Building = \n\n The building stands near the river . \n" * 10,
        "test": " = Robert Boulter = \n\n Robert Boulter is an English actor . \n" * 10,
    }
    root.mkdir(parents=True)
    for split, text in texts.items():
        (root / f"wiki.{split}.raw").write_text(text, encoding="utf-8")
    return texts


def test_wikitext_raw_directory(tmp_path, tok):
    texts = _write_wikitext(tmp_path / "wikitext-2-raw")
    train = build_dataset("wikitext", seq_len=16, tokenizer=tok, path=tmp_path / "wikitext-2-raw")
    ev = build_dataset(
        "wikitext", seq_len=16, tokenizer=tok, path=tmp_path / "wikitext-2-raw", split="eval"
    )
    stream = tok.encode(texts["train"]) + [tok.eos_id]
    assert train.tokens.flatten().tolist() == stream[: len(train) * 16]
    assert tok.decode(ev.tokens[0].tolist()).startswith(" = Tower Building")  # valid, not test


def test_jsonl_directory_and_hf_cache_layout(tmp_path, tok):
    repo = tmp_path / "hub" / "datasets--someone--tiny-text"
    data = repo / "snapshots" / "rev1" / "plain"
    data.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev1")
    rows = [{"text": f"row {i}: the quick brown fox jumps over the lazy dog"} for i in range(60)]
    with open(data / "train-00000-of-00001.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(data / "validation.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[:12])
    assert resolve_text_source("someone/tiny-text/plain", hf_cache_dir=tmp_path / "hub") == data
    assert read_documents(data / "validation.jsonl")[3] == rows[3]["text"]
    ds = build_dataset("text", seq_len=16, tokenizer=tok, path=data)
    expected = [i for r in rows for i in tok.encode(r["text"]) + [tok.eos_id]]
    assert ds.tokens.flatten().tolist() == expected[: len(ds) * 16]
    with pytest.raises(FileNotFoundError, match="downloads are disabled"):
        resolve_text_source("someone/absent", hf_cache_dir=tmp_path / "hub")


def test_single_file_split_and_unsupported_formats(tmp_path, tok):
    (tmp_path / "book.txt").write_text("It was a bright cold day in April. " * 200)
    train = build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "book.txt")
    ev = build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "book.txt", split="eval")
    assert len(ev) == (len(train) + len(ev)) // EVAL_STRIDE > 0
    (tmp_path / "train.parquet").write_bytes(b"PAR1")
    with pytest.raises(ValueError, match="need pyarrow"):
        read_documents(tmp_path / "train.parquet")
    (tmp_path / "bad.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match="record 0 has no string field 'text'"):
        read_documents(tmp_path / "bad.jsonl")


def test_load_windows_for_a_run(cache_dir):
    model = PRESETS["tiny"].replace(vocab_size=VOCAB)
    data = SimpleNamespace(name="pydoc", path=None, max_samples=50, eval_samples=7)
    train, ev = load_windows(data, model, seed=3, cache_dir=cache_dir)
    assert train.shape == (50, model.seq_len) and ev.shape == (7, model.seq_len)
    again, _ = load_windows(data, model, seed=4, cache_dir=cache_dir)
    assert torch.equal(train, again)  # the seed does not move sample ids


def test_sampler_epochs_cover_every_sample_once():
    s = Sampler(num_samples=50, micro_batch_size=3, num_micro_batches=2, seed=7, num_replicas=2)
    assert s.samples_per_step == 12 and s.steps_per_epoch == 4
    for epoch in range(2):
        steps = range(epoch * 4, epoch * 4 + 4)
        ids = torch.cat([s.step_ids(t, r).flatten() for t in steps for r in range(2)])
        assert len(set(ids.tolist())) == 48 and ids.max() < 50
    assert not torch.equal(s.step_ids(0), s.step_ids(4))  # reshuffled per epoch
    assert torch.equal(s.micro_batch_ids(5, 1, replica=1), s.step_ids(5, 1)[1])
    assert torch.equal(
        batch_ids(1, 1, 7, num_samples=50, micro_batch_size=3, num_micro_batches=2,
                  micro_batch=1, replica=1, num_replicas=2),
        s.micro_batch_ids(5, 1, replica=1),
    )  # fmt: skip
    with pytest.raises(ValueError, match="fewer than the 12 samples of one step"):
        Sampler(num_samples=11, micro_batch_size=3, num_micro_batches=2, seed=0, num_replicas=2)
    with pytest.raises(ValueError, match=r"replica must be in \[0, 2\), got 2"):
        s.step_ids(0, replica=2)


_RANK_SCRIPT = """
import sys, json
from aqsgd.data import Sampler
s = Sampler(num_samples=1000, micro_batch_size=4, num_micro_batches=3, seed=11, num_replicas=2)
print(json.dumps([s.step_ids(t, r).tolist() for t in (0, 1, 83, 84, 500) for r in (0, 1)]))
"""


@pytest.mark.timeout(60)
def test_sampler_identical_across_processes():
    """Two "ranks" in separate interpreters (different hash seeds) derive equal ids."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _RANK_SCRIPT], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONHASHSEED": hash_seed})
        for hash_seed in ("1", "2")
    ]  # fmt: skip
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=50)
        assert proc.returncode == 0
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1]
    local = Sampler(num_samples=1000, micro_batch_size=4, num_micro_batches=3, seed=11,
                    num_replicas=2)  # fmt: skip
    assert outputs[0][0] == local.step_ids(0, 0).tolist()
