"""Compression on the wire: activation compressors and their per-sample cache
(activation.py, cache.py), one direction's configuration and the size rule of its
messages (message.py), data-parallel gradient averaging (gradient.py), the byte
count of a message (wire.py), and the registries (registry.py, filled on first use) of
the activation modes (one module each in modes/) and the gradient codecs (one module
each in codecs/), with what registering checks (contract.py, trial.py), and the in-graph
half a mode may declare: modules trained with the model on each side of a boundary
(ingraph.py).

Imports aqsgd.quant and torch; nothing of aqsgd.train, aqsgd.model or aqsgd.data.
"""
