"""PTX audit of the Triton quantizer kernels: compiled for an sm_XX target, no GPU needed.

Every kernel variant of `aqsgd.quant.triton_kernels` (one per constexpr branch, at the
tile sizes the CUDA host code picks) is compiled with the num_warps the host would use,
and its PTX is searched for fused multiply-adds, approximate division or sqrt and
flush-to-zero, each of which would break bit-exactness with torch; registers and spill
bytes per thread come from cuobjdump when it is at hand. Run by
`python -m bench.micro.gpu_check --ptx-audit` (and as a stage of the full GPU check).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable

__all__ = ["ptx_audit"]

# PTX patterns that must not appear: each rounds differently from torch's fp32 ops.
_FORBIDDEN_PTX = {
    "fused multiply-add": r"\bfma\.",
    "approximate division": r"\bdiv\.(approx|full)\.",
    "approximate sqrt": r"\bsqrt\.approx\.",
    "flush-to-zero": r"\.ftz\b",  # e.g. tl.floor's cvt.rmi.ftz: negative subnormals -> -0
}


def _audit_variants() -> list[tuple[str, dict, dict]]:
    """(kernel name, pointer dtypes, constexprs) covering every constexpr branch, at the
    tile sizes the CUDA host code picks for (B, L, 1600) rows and groups of 128."""
    flat = 128  # triton_launch._TILES["cuda"].flat_octets
    common = dict(SYMMETRIC=False, X_BF16=False, M_BF16=False, IDX64=False)
    enc_ptrs = {"x_ptr": "*fp32", "m_ptr": "*fp16", "scale_ptr": "*fp16", "inv_ptr": "*fp32",
                "step_ptr": "*fp32", "out_ptr": "*u8"}  # fmt: skip
    bf16_ptrs = {**enc_ptrs, "x_ptr": "*i16", "m_ptr": "*i16"}
    out = []
    for bits, sym, stoch, l2, col, has_m, rows, octets in [
            (4, False, False, False, False, True, 1, 256),
            (3, True, True, True, False, True, 16, 16),
            (8, False, True, False, True, True, 1, 256),
            (1, True, False, False, True, False, 1, 256)]:
        out.append(("encode_rows_kernel", enc_ptrs, {**common, "BITS": bits, "SYMMETRIC": sym,
                    "STOCHASTIC": stoch, "L2": l2, "COL_SCALES": col, "HAS_M": has_m,
                    "ROWS": rows, "OCTETS": octets}))  # fmt: skip
    out.append(("encode_rows_kernel", bf16_ptrs, {**common, "BITS": 2, "STOCHASTIC": True,
                "L2": False, "COL_SCALES": False, "HAS_M": True, "X_BF16": True, "M_BF16": True,
                "ROWS": 8, "OCTETS": 64, "IDX64": True}))  # fmt: skip
    for by_row, bits, sym, stoch in [(False, 3, False, True), (True, 5, True, False)]:
        out.append(("encode_flat_kernel", enc_ptrs, {**common, "BY_ROW": by_row, "BITS": bits,
                    "SYMMETRIC": sym, "STOCHASTIC": stoch, "HAS_M": True, "OCTETS": flat}))
    dec = {"packed_ptr": "*u8", "scale_ptr": "*fp16", "out_ptr": "*fp32"}
    for by_row, bits, sym, acc in [(False, 4, False, True), (True, 3, True, False)]:
        out.append(("decode_flat_kernel", dec, {"BY_ROW": by_row, "BITS": bits,
                    "SYMMETRIC": sym, "ACCUMULATE": acc, "OUT_BF16": False, "OCTETS": flat,
                    "IDX64": False}))  # fmt: skip
    out.append(("decode_flat_kernel", {**dec, "out_ptr": "*i16"}, {"BY_ROW": True, "BITS": 8,
                "SYMMETRIC": False, "ACCUMULATE": True, "OUT_BF16": True, "OCTETS": flat,
                "IDX64": True}))  # fmt: skip
    for col, bits, sym, acc, bf16 in [(True, 4, False, True, False), (False, 6, True, False, True)]:
        out.append(("decode_rows_kernel", {**dec, "out_ptr": "*i16" if bf16 else "*fp16"},
                    {"BITS": bits, "SYMMETRIC": sym, "COL_SCALES": col, "ACCUMULATE": acc,
                     "OUT_BF16": bf16, "ROWS": 1, "OCTETS": 256, "IDX64": bf16}))
    stat_ptrs = {"x_ptr": "*fp32", "m_ptr": "*fp16", "scale_ptr": "*fp16", "inv_ptr": "*fp32",
                 "step_ptr": "*fp32", "part_ptr": "*fp32"}  # fmt: skip
    for l2 in (False, True):
        out.append(("row_scales_kernel", stat_ptrs, {**common, "BITS": 4, "SYMMETRIC": l2,
                    "L2": l2, "HAS_M": True, "ROWS": 16, "COLS": 128}))  # fmt: skip
        out.append(("col_partial_kernel", stat_ptrs, {"L2": l2, "HAS_M": True, "X_BF16": False,
                    "M_BF16": False, "BLOCK_R": 16, "BLOCK_C": 128, "IDX64": False}))
        out.append(("col_finalize_kernel", stat_ptrs, {"BITS": 4, "SYMMETRIC": l2, "L2": l2,
                    "BLOCK_C": 128}))  # fmt: skip
    return out


def _tile_elems(consts: dict) -> int:
    """Elements per program of a variant, as the host computes it for num_warps."""
    if "ROWS" in consts:
        return consts["ROWS"] * consts.get("COLS", consts.get("OCTETS", 1) * 8)
    if "BLOCK_R" in consts:
        return consts["BLOCK_R"] * consts["BLOCK_C"]
    return consts.get("OCTETS", 0) * 8 or consts["BLOCK_C"]


def _resource_usage(cubin: bytes) -> dict:
    """Registers and local (spill) bytes per thread from cuobjdump, when it is at hand."""
    import tempfile

    import triton

    tool = getattr(getattr(triton.knobs.nvidia, "cuobjdump", None), "path", None)
    if not tool:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True,
                                  timeout=60).stdout  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return {}
    found = re.search(r"REG:(\d+).*?LOCAL:(\d+)", text)
    return {"registers": int(found[1]), "local_bytes": int(found[2])} if found else {}


def ptx_audit(arch: int = 90, log: Callable[[str], None] = print) -> list[dict]:
    """Compile every kernel variant for sm_<arch> on this host (no GPU needed) with the
    num_warps the host would pick, check its PTX, and report registers per thread.
    Needs real Triton JIT functions: run it without TRITON_INTERPRET."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if triton.knobs.runtime.interpret:
        raise RuntimeError("ptx_audit compiles real kernels: unset TRITON_INTERPRET first")
    from aqsgd.quant import triton_kernels, triton_launch

    target = GPUTarget("cuda", arch, 32)
    per_thread = triton_launch._TILES["cuda"].elems_per_thread
    records = []
    for name, ptrs, consts in _audit_variants():
        fn = getattr(triton_kernels, name)
        sig = {a: "constexpr" if a in consts else ptrs.get(a, "i32") for a in fn.arg_names}
        warps = min(32, max(1, _tile_elems(consts) // (32 * per_thread)))
        t0 = time.perf_counter()
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                                  target=target,
                                  options={"num_warps": warps, "enable_fp_fusion": False})
        ptx = compiled.asm["ptx"]
        found = {what: len(re.findall(pat, ptx)) for what, pat in _FORBIDDEN_PTX.items()}
        rec = {"kernel": name, "constexprs": consts, "arch": f"sm_{arch}", "num_warps": warps,
               "compile_s": round(time.perf_counter() - t0, 2),
               "ptx_lines": ptx.count("\n"), "forbidden": found,
               **_resource_usage(compiled.asm.get("cubin", b"")),
               "ok": not any(found.values()) and bool(compiled.asm.get("cubin"))}
        log(f"  ptx {'ok  ' if rec['ok'] else 'FAIL'} {name} warps={warps} "
            f"regs={rec.get('registers')} local={rec.get('local_bytes')} {consts} {found}")
        records.append(rec)
    return records
