"""A tokenizer read from its files (aqsgd.data.tokenizer.load_tokenizer), its identity
(files_digest), and the suite's BPE never standing in for GPT-2's."""

import pytest
from data_helpers import VOCAB

from aqsgd.data.tokenizer import (
    files_digest,
    load_tokenizer,
    tokenizer_files,
    tokenizer_for,
)


def test_each_layout_loads_the_same_ids(tmp_path, tok):
    text = "def f(x):\n    return x  # héllo<|endoftext|>"
    one = tmp_path / "one"
    one.mkdir()
    tok.backend.save(str(one / "tokenizer.json"))
    pair = tmp_path / "pair"
    pair.mkdir()
    tok.backend.model.save(str(pair))  # vocab.json + merges.txt
    for where in (one, one / "tokenizer.json", pair, pair / "vocab.json"):
        loaded = load_tokenizer(where)
        assert loaded.vocab_size == VOCAB and loaded.encode(text) == tok.encode(text), where
    assert tokenizer_files(pair) == (pair / "vocab.json", pair / "merges.txt")


def test_the_digest_is_of_the_files(tmp_path, tok):
    path = tmp_path / "tokenizer.json"
    tok.backend.save(str(path))
    first = files_digest([path])
    assert load_tokenizer(path).name.endswith(first)
    path.write_text(path.read_text().replace('"<|endoftext|>"', '"<|endoftext|>" '))
    assert files_digest([path]) != first


def test_no_files_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer at .*looked for "
                                                r"tokenizer.json or vocab.json \+ merges.txt"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.json").write_text("{}")
    assert tokenizer_files(tmp_path / "vocab.json") is None  # no merges.txt beside it


def test_a_big_vocabulary_without_gpt2_files_is_refused_not_replaced(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"50257 tokens needs GPT-2's tokenizer .* "
                                                r"at most 8192 tokens"):
        tokenizer_for(50257, tmp_path, hf_cache_dir=tmp_path / "empty")
