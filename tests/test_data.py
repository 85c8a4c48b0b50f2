"""Tokenizer cache, token windows with stable ids, local text loaders, the sampler."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import torch
from transformers import GPT2Tokenizer

from aqsgd.data.hfcache import hf_cache_dirs, resolve_text_source
from aqsgd.data.sampler import Sampler
from aqsgd.data.sources import pydoc_documents, read_documents
from aqsgd.data.tokenizer import (
    EOS_TOKEN,
    bpe_tokenizer,
    cached_gpt2_files,
    gpt2_tokenizer,
    tokenizer_for,
)
from aqsgd.data.windows import EVAL_STRIDE, _stream, build_dataset, load_windows
from aqsgd.model.config import PRESETS
from aqsgd.train.config import config_from_dict

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
    with pytest.raises(ValueError, match="split must be one of .*, got 'dev'"):
        build_dataset("pydoc", seq_len=8, tokenizer=tok, split="dev")
    with pytest.raises(ValueError, match="split 'test' needs split files; data set 'pydoc'"):
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
    with pytest.raises(ValueError, match="split 'test' needs split files"):
        build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "book.txt", split="test")
    (tmp_path / "train.parquet").write_bytes(b"PAR1")  # magic only: truncated
    with pytest.raises(ValueError, match=r"train.parquet: not a readable .parquet file"):
        read_documents(tmp_path / "train.parquet")
    (tmp_path / "bad.jsonl").write_text('{"body": "x"}\n')
    with pytest.raises(ValueError, match="record 0 has no string field 'text'"):
        read_documents(tmp_path / "bad.jsonl")


def test_load_windows_for_a_run(cache_dir):
    model = PRESETS["tiny"].replace(vocab_size=VOCAB)
    data = SimpleNamespace(name="pydoc", path=None, max_samples=50, eval_samples=7,
                           text_field="text")  # fmt: skip
    train, ev = load_windows(data, model, cache_dir=cache_dir)
    assert train.shape == (50, model.seq_len) and ev.shape == (7, model.seq_len)
    again, _ = load_windows(data, model, cache_dir=cache_dir)
    assert torch.equal(train, again)  # no seed: a rebuild keeps every sample id


def test_sampler_epochs_cover_every_sample_once():
    s = Sampler(num_samples=50, micro_batch_size=3, num_micro_batches=2, seed=7, num_replicas=2)
    assert s.samples_per_step == 12 and s.steps_per_epoch == 4
    for epoch in range(2):
        steps = range(epoch * 4, epoch * 4 + 4)
        ids = torch.cat([s.step_ids(t, r).flatten() for t in steps for r in range(2)])
        assert len(set(ids.tolist())) == 48 and ids.max() < 50
    assert not torch.equal(s.step_ids(0), s.step_ids(4))  # reshuffled per epoch
    # Global step 5 is step 1 of epoch 1; its ids are laid out (micro-batch, sample).
    assert (s.epoch_of(3), s.epoch_of(4), s.epoch_of(5)) == (0, 1, 1)
    assert s.step_ids(5, 1).shape == (2, 3)
    with pytest.raises(ValueError, match="fewer than the 12 samples of one step"):
        Sampler(num_samples=11, micro_batch_size=3, num_micro_batches=2, seed=0, num_replicas=2)
    with pytest.raises(ValueError, match=r"replica must be in \[0, 2\), got 2"):
        s.step_ids(0, replica=2)


_RANK_SCRIPT = """
import sys, json
from aqsgd.data.sampler import Sampler
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


# ---------------------------------------------------------------- parquet and arrow

# WikiText as the hub stores it: one row per line, "" for a blank line.
WIKI_ROWS = {
    "train": ["", " = Valkyria Chronicles III = \n", ""]
    + [f" Senjō no Valkyria {i} is a tactical role @-@ playing game .\n" for i in range(30)],
    "validation": ["", " = Tower Building = \n", ""]
    + [f" The building {i} stands near the river .\n" for i in range(12)],
    "test": ["", " = Robert Boulter = \n", ""]
    + [f" Robert Boulter {i} is an English actor .\n" for i in range(12)],
}


def _write_parquet(path: Path, columns: dict[str, list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _write_arrow_stream(path: Path, columns: dict[str, list], batches: int = 2) -> None:
    """An Arrow IPC stream in several record batches, as `datasets` writes its cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(columns)
    size = -(-table.num_rows // batches)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=size):
            writer.write_batch(batch)


def _fake_hub_dataset(hub: Path, repo: str, files: dict[str, dict[str, list]]) -> Path:
    """A hub-cache tree: blobs, snapshots/<rev>/<file> symlinked to them, refs/main.
    An older snapshot with other contents sits beside it: refs/main must win."""
    root = hub / ("datasets--" + repo.replace("/", "--"))
    for rev, tag in (("f00d01d", "old "), ("c0ffee", "")):  # the stale one sorts last
        for i, (name, columns) in enumerate(files.items()):
            blob = root / "blobs" / f"{rev}{i:04d}"
            _write_parquet(
                blob, {k: [tag + v if v else v for v in vs] for k, vs in columns.items()}
            )
            link = root / "snapshots" / rev / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("c0ffee")
    return root / "snapshots" / "c0ffee"


@pytest.mark.timeout(30)
def test_wikitext_parquet_in_hub_cache_through_load_windows(tmp_path, monkeypatch, tok):
    hf_home = tmp_path / "hf"
    files = {
        f"{config}/{split}-00000-of-00001.parquet": {"text": rows}
        for config in ("wikitext-2-raw-v1", "wikitext-103-raw-v1")
        for split, rows in WIKI_ROWS.items()
    }
    snapshot = _fake_hub_dataset(hf_home / "hub", "Salesforce/wikitext", files)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))  # read at call time, after import
    assert hf_cache_dirs() == (hf_home / "hub", hf_home / "datasets")
    assert resolve_text_source("Salesforce/wikitext/wikitext-2-raw-v1") == (
        snapshot / "wikitext-2-raw-v1"
    )
    # A run config's data section, as the worker passes it. No path: `wikitext` finds
    # wikitext-2-raw-v1 in the hub cache.
    sections = {
        "data": {"name": "wikitext", "eval_samples": 5},
        "model": {"preset": "tiny", "vocab_size": VOCAB, "seq_len": 16},
    }
    run = config_from_dict(sections)
    data, model = run.data, run.model
    train, ev = load_windows(data, model, tokenizer=tok)
    # The rows are the lines of one document per split; "" rows are blank lines.
    text = "".join(row or "\n" for row in WIKI_ROWS["train"])
    stream = tok.encode(text) + [tok.eos_id]
    assert train.shape == (len(stream) // 16, 16)
    assert train.flatten().tolist() == stream[: train.numel()]
    assert tok.decode(ev[0].tolist()).startswith("\n = Tower Building")  # validation
    # Stable sample ids: an explicit id and a cap keep row i the same.
    capped = SimpleNamespace(name="wikitext", path="Salesforce/wikitext/wikitext-2-raw-v1",
                             max_samples=7, eval_samples=5, text_field="text")  # fmt: skip
    train7, ev2 = load_windows(capped, model, tokenizer=tok)
    assert torch.equal(train7, train[:7]) and torch.equal(ev2, ev)
    test = build_dataset("wikitext", seq_len=16, tokenizer=tok, split="test",
                         path=snapshot / "wikitext-2-raw-v1")  # fmt: skip
    assert tok.decode(test.tokens[0].tolist()).startswith("\n = Robert Boulter")
    # The snapshot root holds two configs: refuse to mix them.
    with pytest.raises(ValueError, match=r"'train' files lie in 2 folders \['wikitext-103-raw"):
        build_dataset("wikitext", seq_len=16, tokenizer=tok, path="Salesforce/wikitext")
    # HF_HUB_CACHE overrides HF_HOME.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match="no path and wikitext-2-raw-v1 is in no local"):
        load_windows(data, model, tokenizer=tok)


@pytest.mark.timeout(30)
def test_datasets_cache_arrow_streams(tmp_path, monkeypatch, tok):
    """`datasets`' own cache: <name>/<config>/<version>/<hash>/<name>-<split>.arrow."""
    cache = tmp_path / "ds-cache"
    leaf = cache / "someone___tiny-docs" / "default" / "0.0.0" / "9f8e7d6c5b4a"
    docs = {s: [f"{s} doc {i}: the quick brown fox jumps over the lazy dog" for i in range(40)]
            for s in ("train", "validation", "test")}  # fmt: skip
    for split, rows in docs.items():
        rows = rows[:5] + ["", None] + rows[5:]  # empty and null rows: no document
        ids = list(range(len(rows)))
        _write_arrow_stream(leaf / f"tiny-docs-{split}.arrow", {"id": ids, "text": rows})
    (leaf / "dataset_info.json").write_text('{"description": "metadata, not data"}')
    # An interrupted build beside it: `datasets` never renamed it, so it is not data.
    _write_arrow_stream(leaf.with_name(leaf.name + ".incomplete") / "tiny-docs-train.arrow",
                        {"text": ["half written"]})  # fmt: skip
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    assert resolve_text_source("someone/tiny-docs") == cache / "someone___tiny-docs"
    ds = build_dataset("text", seq_len=16, tokenizer=tok, path="someone/tiny-docs")
    expected = [i for doc in docs["train"] for i in tok.encode(doc) + [tok.eos_id]]
    assert ds.tokens.flatten().tolist() == expected[: len(ds) * 16]  # one row, one document
    ev = build_dataset("text", seq_len=16, tokenizer=tok, path="someone/tiny-docs", split="eval")
    assert tok.decode(ev.tokens[0].tolist()).startswith("validation doc 0")
    # A second cached version of the config: ambiguous, so it names both folders.
    _write_arrow_stream(leaf.parent.parent / "0.0.1" / "aaaa" / "tiny-docs-train.arrow",
                        {"text": docs["train"]})  # fmt: skip
    with pytest.raises(ValueError, match=r"lie in 2 folders \['default/0.0.0/9f8e7d6c5b4a'"):
        build_dataset("text", seq_len=16, tokenizer=tok, path="someone/tiny-docs")
    # The Arrow file format (random access) reads too, as does save_to_disk's layout.
    saved = tmp_path / "saved"
    with pa.OSFile(str(_mkparent(saved / "train" / "data-00000-of-00001.arrow")), "wb") as sink:
        with pa.ipc.new_file(sink, pa.schema([("text", pa.large_string())])) as writer:
            writer.write_table(pa.table({"text": pa.array(docs["test"], pa.large_string())}))
    (saved / "train" / "state.json").write_text("{}")
    (saved / "dataset_dict.json").write_text('{"splits": ["train"]}')
    disk = build_dataset("text", seq_len=16, tokenizer=tok, path=saved)
    assert tok.decode(disk.tokens[0].tolist()).startswith("test doc 0")


def _mkparent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_columnar_errors(tmp_path, tok):
    _write_parquet(tmp_path / "d" / "train.parquet", {"body": ["some words"] * 50, "id": [1] * 50})
    assert read_documents(tmp_path / "d" / "train.parquet", "body")[0] == "some words"
    with pytest.raises(ValueError, match=r"no column 'text' \(text_field\); the columns are "
                                         r"\['body', 'id'\]"):  # fmt: skip
        build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "d")
    with pytest.raises(ValueError, match="column 'id' holds int64, not strings"):
        read_documents(tmp_path / "d" / "train.parquet", "id")
    train = build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "d", text_field="body")
    assert len(train) > 0
    with pytest.raises(FileNotFoundError, match=r"no file for split 'eval' .*'train.parquet'"):
        build_dataset("text", seq_len=8, tokenizer=tok, path=tmp_path / "d", split="eval")
    _write_arrow_stream(tmp_path / "e" / "e-train.arrow", {"text": ["", None, "  \n"]})
    with pytest.raises(ValueError, match=r"split 'train': no text in .*e-train.arrow"):
        build_dataset("wikitext", seq_len=8, tokenizer=tok, path=tmp_path / "e")
    (tmp_path / "e" / "bad-test.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(ValueError, match="bad-test.arrow: not a readable .arrow file"):
        read_documents(tmp_path / "e" / "bad-test.arrow")


def test_long_documents_encode_in_pieces_with_the_same_ids(tok):
    """Cut into pieces of a few characters, real text (pydoc topics, WikiText-like lines
    ending " \\n" with blank lines, digits, contractions, runs of spaces, non-ASCII)
    keeps its exact ids."""
    wiki = "".join((row[:-1] + " \n") if row else "\n" for row in WIKI_ROWS["train"])
    odd = "It's 1,234 o'clock  ,  two  spaces\t\ttabs \u00e9t\u00e9 \u6226\u5834 x=1;y=22 \n" * 30
    docs = [*pydoc_documents()[:10], wiki, odd, "", "short"]
    whole = _stream(docs, tok, chunk_chars=10**9)
    pieces = _stream(docs, tok, chunk_chars=5)
    expected = [i for doc in docs for i in tok.encode(doc) + [tok.eos_id]]
    assert whole.tolist() == expected
    assert torch.equal(pieces, whole)
    assert (pieces == tok.eos_id).sum() == len(docs)  # one EOS per document, not per piece


def test_run_config_text_field_picks_the_column(tmp_path, cache_dir):
    """`data.text_field` in a run config reaches the columnar reader."""
    folder = tmp_path / "wikitext-2-raw-v1"
    folder.mkdir()
    lines = [x for i in range(20) for x in (f" = Heading {i} = ", "", f"Sentence {i} . " * 20)]
    for split in ("train", "validation"):
        pq.write_table(pa.table({"body": lines}), folder / f"{split}-00000-of-00001.parquet")
    base = {"model": {"preset": "tiny"},
            "data": {"name": "wikitext", "path": str(tmp_path), "eval_samples": 4}}
    with pytest.raises(ValueError, match=r"no column 'text'.*\['body'\]"):
        cfg = config_from_dict(base)
        load_windows(cfg.data, cfg.model, cache_dir=cache_dir)
    cfg = config_from_dict({**base, "data": {**base["data"], "text_field": "body"}})
    train, evals = load_windows(cfg.data, cfg.model, cache_dir=cache_dir)
    assert train.shape[1] == cfg.model.seq_len and train.shape[0] > 10
    assert evals.shape == (4, cfg.model.seq_len)
    with pytest.raises(ValueError, match="text_field"):
        config_from_dict({**base, "data": {**base["data"], "text_field": ""}})
