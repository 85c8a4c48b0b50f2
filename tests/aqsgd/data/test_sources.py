"""Local text sources (aqsgd.data.sources, aqsgd.data.hfcache): WikiText directories, JSONL,
single files, and the hub's parquet and datasets' arrow caches, with their errors."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import torch
from data_helpers import VOCAB, WIKI_ROWS

from aqsgd.data.hfcache import hf_cache_dirs, resolve_text_source
from aqsgd.data.sources import read_documents
from aqsgd.data.windows import EVAL_STRIDE, build_dataset, load_windows
from aqsgd.train.config import config_from_dict


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
        "pipeline": {"micro_batch_size": 4},
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
