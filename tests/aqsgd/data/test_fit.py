"""Whether a data set fills a run's windows (aqsgd.data.fit): the counts are the windows
the worker cuts, and a shortfall says what would fit."""

from data_helpers import WIKI_ROWS

from aqsgd.data.fit import TokenCounts, count_tokens, fit_problem
from aqsgd.data.windows import build_dataset


def _wikitext(folder):
    folder.mkdir()
    for split, name in (("train", "wiki.train.raw"), ("validation", "wiki.valid.raw")):
        (folder / name).write_text("".join(row or "\n" for row in WIKI_ROWS[split]) * 20)
    return folder


def test_counts_are_the_windows_built(tmp_path, tok, cache_dir):
    for name, path in (("pydoc", None), ("wikitext", _wikitext(tmp_path / "wiki"))):
        counts = count_tokens(name, tok, path, cache_dir=cache_dir)
        for seq_len in (16, 100):
            built = [len(build_dataset(name, seq_len=seq_len, tokenizer=tok, split=split,
                                       path=path, cache_dir=cache_dir))
                     for split in ("train", "eval")]
            assert list(counts.windows(seq_len)) == built, (name, seq_len)


def test_a_shortfall_names_what_would_fit():
    # one stream of 117,760 tokens: 115 windows of 1024, every 20th held out (5)
    counts = TokenCounts("pydoc", 115 * 1024, 0, by_stride=True)
    assert counts.windows(1024) == (110, 5)
    assert fit_problem(counts, 1024, train=100, held_out=4) == ""
    text = fit_problem(counts, 1024, train=128, held_out=128)
    assert text.startswith("data set 'pydoc' gives 110 train windows of 1024 tokens, fewer "
                           "than the 128 asked and 5 held-out windows")
    longest = counts.longest_fit(128, 128)
    fits = [min(have - 128 for have in counts.windows(n)) >= 0 for n in (longest, longest + 1)]
    assert fits == [True, False]
    assert f"seq_len at most {longest}" in text and "more tokens of text" in text
    split = TokenCounts("wikitext", 10_000, 500, by_stride=False)
    assert split.windows(100) == (100, 5)
    assert "more text in the split" in fit_problem(split, 100, 50, 10)
