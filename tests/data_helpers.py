"""What the data tests share (tests/aqsgd/data/): the small tokenizer's vocabulary and
WikiText rows as the hub stores them."""

VOCAB = 300  # small BPE: trains in well under a second

# WikiText as the hub stores it: one row per line, "" for a blank line.
WIKI_ROWS = {
    "train": ["", " = Valkyria Chronicles III = \n", ""]
    + [f" Senjō no Valkyria {i} is a tactical role @-@ playing game .\n" for i in range(30)],
    "validation": ["", " = Tower Building = \n", ""]
    + [f" The building {i} stands near the river .\n" for i in range(12)],
    "test": ["", " = Robert Boulter = \n", ""]
    + [f" Robert Boulter {i} is an English actor .\n" for i in range(12)],
}
