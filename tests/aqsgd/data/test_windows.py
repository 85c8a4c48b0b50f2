"""Token windows with stable ids (aqsgd.data.windows): pydoc windows, the windows of a run,
long documents encoded in pieces, the text field a run config picks."""

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
import torch
from data_helpers import VOCAB, WIKI_ROWS

from aqsgd.data.sources import pydoc_documents
from aqsgd.data.windows import EVAL_STRIDE, _stream, build_dataset, load_windows
from aqsgd.model.config import PRESETS
from aqsgd.train.config import config_from_dict


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


@pytest.mark.timeout(30)
def test_a_cached_builtin_stream_is_the_tokenized_one_and_is_read_back(tok, tmp_path):
    import aqsgd.data.windows as windows

    direct = build_dataset("pydoc", seq_len=32, tokenizer=tok)
    first = build_dataset("pydoc", seq_len=32, tokenizer=tok, cache_dir=tmp_path)
    (cached,) = (tmp_path / "tokens").glob(f"pydoc-{tok.fingerprint}-*.pt")
    windows._builtin_stream.cache_clear()  # as a new process: only the file is left
    stamp = cached.stat().st_mtime_ns
    again = build_dataset("pydoc", seq_len=32, tokenizer=tok, cache_dir=tmp_path, split="eval")
    assert torch.equal(first.tokens, direct.tokens)
    assert torch.equal(again.tokens, build_dataset("pydoc", seq_len=32, tokenizer=tok,
                                                   split="eval").tokens)
    assert cached.stat().st_mtime_ns == stamp  # read, not written again


def test_build_dataset_errors(tok):
    with pytest.raises(ValueError, match="data set name must be one of"):
        build_dataset("nope", seq_len=8, tokenizer=tok)
    with pytest.raises(ValueError, match="split must be one of .*, got 'dev'"):
        build_dataset("pydoc", seq_len=8, tokenizer=tok, split="dev")
    with pytest.raises(ValueError, match="split 'test' needs split files; data set 'pydoc'"):
        build_dataset("pydoc", seq_len=8, tokenizer=tok, split="test")
    with pytest.raises(ValueError, match="needs a path"):
        build_dataset("text", seq_len=8, tokenizer=tok)


def test_load_windows_for_a_run(cache_dir):
    model = PRESETS["tiny"].replace(vocab_size=VOCAB)
    data = SimpleNamespace(name="pydoc", path=None, max_samples=50, eval_samples=7,
                           text_field="text")  # fmt: skip
    train, ev = load_windows(data, model, cache_dir=cache_dir)
    assert train.shape == (50, model.seq_len) and ev.shape == (7, model.seq_len)
    again, _ = load_windows(data, model, cache_dir=cache_dir)
    assert torch.equal(train, again)  # no seed: a rebuild keeps every sample id


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
    base = {"model": {"preset": "tiny"}, "pipeline": {"micro_batch_size": 4},
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
