"""Fixtures of the data tests: a cache directory and the small BPE tokenizer trained into
it, once per test module."""

import pytest
from data_helpers import VOCAB

from aqsgd.data.tokenizer import bpe_tokenizer


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def tok(cache_dir):
    return bpe_tokenizer(VOCAB, cache_dir, corpus_chars=200_000)
