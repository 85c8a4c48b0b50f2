"""The model: configuration and presets (config), GPT-2 pipeline stages (gpt2), the
GPT-2 block (block), pretrained weights (weights), the starting checkpoint (pretrain) and
the ones shipped with the repository with their bit-for-bit rebuild check (shipped).
Stage timing against traffic is a micro-benchmark outside the library (bench.micro.stages).

Imports aqsgd.data (tokenizer and windows, for pre-training) and aqsgd.filecache only.
"""
