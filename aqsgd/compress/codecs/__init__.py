"""Data-parallel gradient codecs: one module each, found by aqsgd.compress.registry.

A module here declares `CODEC`, a `base.DataParallel` subclass: its name
(`GradCompressionConfig.mode`), how it averages the replicas' gradients (its
`synchronize`, its optimizer), its byte rule (`exchange_nbytes`, what `bytes_sent`
counts) and the coding work the performance model's profile times (`round_trip`).
`base.py` holds what they share (the sharded exchange and its byte counting); a module
that declares no `CODEC` is a helper and is not registered.

Adding a codec is one module here, its tests, and its per-element cost in every shipped
profile (profiles/*.yaml, `grad_s_per_element`: a profile without one entry per built-in
codec is refused): `GradCompressionConfig.mode`, the harness's `aqsgd+gc/GRAD`
choices, the performance model's profile keys and its step simulation follow from it
(docs/ARCHITECTURE.md, "Where a new thing goes"). A codec outside the suite is a
plug-in (docs/plugins.md).
"""
