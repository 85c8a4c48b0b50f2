"""Activation modes: one module each, found by aqsgd.compress.registry.

A module here declares `MODE`, an `ActivationMode` subclass (how the rows of a pipeline
message are coded, its wire byte rule, whether it needs the per-sample cache, what the
benchmarks time), and/or `COMPARISONS`, the modes of the benchmark comparison built on
it (`Comparison`: the name a sweep and a table use, its rank in tables, the backward
mode, default bit widths). The types live in `base.py`; a module that declares neither
name is a helper and is not registered.

Adding a mode is one module here, its tests, and its per-element cost in every shipped
profile (profiles/*.yaml, `encode_s_per_element` and `decode_s_per_element`: a profile
without one entry per built-in mode is refused): the registry, `CompressionConfig.mode`,
the harness's mode names, the reports' reading order, the performance model's profile
keys and the micro-benchmark's cases all follow from it (docs/ARCHITECTURE.md, "Where a
new thing goes"). A mode outside the suite is a plug-in (docs/plugins.md).
"""
