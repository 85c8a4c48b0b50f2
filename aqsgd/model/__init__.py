"""The model: configuration and presets (config), GPT-2 pipeline stages (gpt2), the
GPT-2 block (block), pretrained weights (weights), the starting checkpoint (pretrain),
stage timing (measure).

Imports aqsgd.data (tokenizer and windows, for pre-training) and aqsgd.filecache only.
"""
