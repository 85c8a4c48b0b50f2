"""Training data: documents (sources, hfcache), tokenizer, token windows, sampler.

Imports nothing of aqsgd but aqsgd.filecache (plus tokenizers and pyarrow); the
model and the training runtime build on it.
"""
