"""The load-time check of an activation mode: one encode and one decode of a small batch,
as a sender and a receiver run them, on CPU, before the mode is used (every registration:
built-in or plug-in, aqsgd.compress.registry).

    round_trip(RandomProjection, "randproj")    # None, or RegistryError naming it

The mode codes TRIAL_SHAPE fp32 rows at its `smoke_case` bits; with the cache, sender and
receiver start from the same cache rows `m`. What must hold: the wire tensors are
`coded_spec`'s (shapes, DATA_SIZED dims of any size, dtypes) and contiguous; decode
returns fp32 rows of the rows' shape; both caches are equal afterwards; everything
is finite. A mode with an in-graph half also builds it for TRIAL_SHAPE's width: its
sender must map (n, L, D) hidden rows to (n, L, k), its receiver those back to (n, L, D),
finite (and a half that calibrates must take the rows). A defect is a RegistryError:
what was expected against what came.
"""

from __future__ import annotations

import torch

from aqsgd.compress.contract import RegistryError
from aqsgd.compress.ingraph import BoundaryShape, boundary_width
from aqsgd.compress.message import TRANSPORT_DTYPES, CompressionConfig
from aqsgd.compress.modes.base import ActivationMode
from aqsgd.compress.wire import DATA_SIZED, WireSpec
from aqsgd.quant import QuantConfig
from aqsgd.quant.backends import auto_means

__all__ = ["TRIAL_SHAPE", "round_trip"]

TRIAL_SHAPE = (3, 4, 64)  # (n_q, L, D): coded rows of 4 tokens, 64 channels (one TAH tile)
_TRIAL_VOCAB = 32  # token ids of an in-graph half's trial


def _dtype_names(mode: type[ActivationMode]) -> list[str]:
    """What is wrong with the transport dtypes of its micro-benchmark cases."""
    cases = [("smoke_case", mode.smoke_case)] + [("bench_cases", c) for c in mode.bench_cases]
    return [f"{attr} {case}: dtype {case[0]!r} is not one of {', '.join(TRANSPORT_DTYPES)}"
            for attr, case in cases if case[0] not in TRANSPORT_DTYPES]


def _wire_defects(coded, spec: WireSpec) -> list[str]:
    if not isinstance(coded, list | tuple) or not all(isinstance(t, torch.Tensor)
                                                       for t in coded):
        return [f"encode returned {type(coded).__name__}, expected a list of tensors"]
    if len(coded) != len(spec):
        return [f"encode returned {len(coded)} tensors, expected {len(spec)} (coded_spec: "
                f"{spec})"]
    out = []
    for i, (t, (shape, dtype)) in enumerate(zip(coded, spec, strict=True)):
        got = tuple(t.shape)
        fits = len(got) == len(shape) and all(w in (DATA_SIZED, n)
                                              for w, n in zip(shape, got, strict=True))
        if not fits or t.dtype != dtype:
            out.append(f"encode returned tensor {i} of shape {got} {t.dtype}, expected "
                       f"{tuple(shape)} {dtype} (coded_spec; {DATA_SIZED}: any size)")
        elif not t.is_contiguous():
            out.append(f"encode returned tensor {i} not contiguous (the wire sends it as "
                       f"is: return t.contiguous())")
    return out


def _nonfinite(named: dict[str, torch.Tensor | None]) -> list[str]:
    out = []
    for what, t in named.items():
        if t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            out.append(f"{what} holds {bad} non-finite values of {t.numel()}")
    return out


def _run(mode: type[ActivationMode], cfg: CompressionConfig) -> list[str]:
    """One message of TRIAL_SHAPE rows through a sender and a receiver: its defects."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(TRIAL_SHAPE, generator=gen)  # (n_q, L, D) fp32
    m_send = m_recv = None
    if mode.uses_cache:  # the cache rows of a visit before: the same on both sides
        m_send = torch.randn(TRIAL_SHAPE, generator=gen)
        m_recv = m_send.clone()
    spec = mode.coded_spec(cfg, TRIAL_SHAPE)
    coded = mode(cfg).encode(rows, gen if cfg.quant.stochastic else None, m_send)
    wrong = _wire_defects(coded, spec)
    if wrong:
        return wrong
    out = mode(cfg).decode([t.clone() for t in coded], TRIAL_SHAPE, m_recv)
    if not isinstance(out, torch.Tensor):
        return [f"decode returned {type(out).__name__}, expected a tensor {TRIAL_SHAPE}"]
    if tuple(out.shape) != TRIAL_SHAPE or out.dtype != torch.float32:
        return [f"decode returned shape {tuple(out.shape)} {out.dtype}, expected "
                f"{TRIAL_SHAPE} torch.float32 (the rows')"]
    wrong = _nonfinite({f"wire tensor {i}": t for i, t in enumerate(coded)}
                       | {"decode's rows": out, "the sender's cache": m_send,
                          "the receiver's cache": m_recv})
    if not wrong and mode.uses_cache and not torch.equal(m_send, m_recv):
        gap = float((m_send - m_recv).abs().max())
        wrong.append(f"sender's and receiver's cache rows differ after one message (by up "
                     f"to {gap:.3g}): encode must update m in place to what decode makes "
                     f"of it")
    return wrong


def _trial_tables() -> tuple[torch.Tensor, torch.Tensor]:
    """Stand-in starting embedding tables (V, D), (L, D) for a half anchored on them."""
    gen = torch.Generator().manual_seed(1)
    width = TRIAL_SHAPE[-1]
    return (torch.randn(_TRIAL_VOCAB, width, generator=gen) * 0.02,
            torch.randn(TRIAL_SHAPE[1], width, generator=gen) * 0.01)


def _run_in_graph(mode: type[ActivationMode], cfg: CompressionConfig) -> list[str]:
    """The in-graph half's modules on TRIAL_SHAPE hidden rows: their defects."""
    n, length, width = TRIAL_SHAPE
    shape = BoundaryShape(seq_len=length, width=width, vocab_size=_TRIAL_VOCAB,
                          embeddings=_trial_tables)
    half = mode.in_graph(cfg, shape)
    k = boundary_width(cfg, width)
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(TRIAL_SHAPE, generator=gen)
    tokens = torch.randint(0, _TRIAL_VOCAB, (n, length), generator=gen)
    sender, receiver = half.sender_module(), half.receiver_module()
    if half.calibrates:
        half.calibrate(sender, hidden.reshape(-1, width))
        half.calibrate(receiver, hidden.reshape(-1, width))
    z = sender(hidden, tokens)
    if not isinstance(z, torch.Tensor) or tuple(z.shape) != (n, length, k):
        got = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
        return [f"its in-graph sender returned {got}, expected {(n, length, k)} (k = "
                f"coords)"]
    back = receiver(z, tokens)
    if not isinstance(back, torch.Tensor) or tuple(back.shape) != TRIAL_SHAPE:
        got = tuple(back.shape) if isinstance(back, torch.Tensor) else type(back).__name__
        return [f"its in-graph receiver returned {got}, expected {TRIAL_SHAPE}"]
    return _nonfinite({"its in-graph sender's output": z, "its in-graph receiver's": back})


def round_trip(mode: type[ActivationMode], where: str) -> None:
    """Check `mode` (registered, declared by module `where`) on one small message;
    RegistryError '{where}: activation mode NAME ...' on the first defect found."""
    name = f"{where}: activation mode {mode.name!r}"
    wrong = _dtype_names(mode)
    if not wrong and mode.codes_rows:
        bits = mode.smoke_case[1]
        try:
            cfg = CompressionConfig(mode=mode.name, quant=QuantConfig(bits=bits))
        except ValueError as err:
            raise RegistryError(f"{name}: smoke_case {mode.smoke_case} gives no config: "
                                f"{err}") from None
        try:
            with auto_means("torch"):  # the same bytes as the fused kernels, nothing built
                wrong = _run(mode, cfg)
        except Exception as err:  # noqa: BLE001 - a plug-in's own bug, reported as such
            raise RegistryError(f"{name}: coding {TRIAL_SHAPE} rows at {bits} bits raised "
                                f"{type(err).__name__}: {err}") from err
    if not wrong and mode.in_graph is not None:
        try:
            cfg = CompressionConfig(mode=mode.name,
                                    quant=QuantConfig(bits=min(8, mode.smoke_case[1])))
            wrong = _run_in_graph(mode, cfg)
        except Exception as err:  # noqa: BLE001 - a plug-in's own bug, reported as such
            raise RegistryError(f"{name}: its in-graph half on {TRIAL_SHAPE} hidden rows "
                                f"raised {type(err).__name__}: {err}") from err
    if wrong:
        raise RegistryError(f"{name} " + "; ".join(wrong))
