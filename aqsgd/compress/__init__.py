"""Compression on the wire: activation compressors and their per-sample cache, data-parallel
gradient compressors, and the byte count of a message (wire.py).

Imports aqsgd.quant and torch; nothing of aqsgd.train, aqsgd.model or aqsgd.data.
"""
