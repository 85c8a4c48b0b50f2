"""Mode syntax (bench.harness.modes): bad modes name the field; defaults and labels."""

from __future__ import annotations

import pytest

from bench.harness.modes import DEFAULT_GRID, GRAD_COMPRESSORS, MODE_NAMES, ModeSpec, parse_mode
from bench.report.summary import mode_text, series_text

pytestmark = pytest.mark.timeout(60)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("text, match", [
    ("aqsgd:9/4", r"fw_bits must be in 1\.\.8, got 9"),
    ("directq:4/0", r"bw_bits must be in 1\.\.8, got 0"),
    ("zstd", r"mode must be one of fp32, directq, tahquant, tahquant-pub, aqsgd, "
             r"aqsgd-adaptive, aqsgd-lowbits, aqsgd-sparse, aqsgd\+gc"),
    ("fp32:2/4", "fp32 takes no bit widths"),
    ("aqsgd:two/4", "NAME:FW/BW with integers"),
])
def test_bad_mode_names_the_field(text, match):
    with pytest.raises(ValueError, match=match):
        parse_mode(text)


def test_modes_parse_with_defaults_and_labels():
    assert [str(parse_mode(m)) for m in DEFAULT_GRID] == list(DEFAULT_GRID)
    assert parse_mode("aqsgd").label == "aqsgd-fw2-bw4"
    assert parse_mode("aqsgd+gc:3/6").label == "aqsgd+gc-qadam-fw3-bw6"


# ------------------------------------------------------------ one spelling
def _every_mode() -> list[ModeSpec]:
    """Every registered mode at its default bits and at 3/6, with each gradient
    compressor where it selects one."""
    modes = []
    for name in MODE_NAMES:
        spec = parse_mode(name)
        grads = GRAD_COMPRESSORS if spec.compresses_dp else ("qadam",)
        bits = [(spec.fw_bits, spec.bw_bits), (3, 6)] if spec.takes_bits else [(None, None)]
        modes += [ModeSpec(name, fw, bw, grad_mode=g) for g in grads for fw, bw in bits]
    return modes


@pytest.mark.parametrize("spec", _every_mode(), ids=str)
def test_every_spelling_of_a_mode_round_trips(spec):
    """The command line's spelling is the tables' and the legends' (summary.mode_text,
    series_text); it and the directory spelling (label) both read back to the mode."""
    row = {"mode": spec.name, "fw_bits": spec.fw_bits, "bw_bits": spec.bw_bits,
           "grad_mode": spec.grad_mode, "variant": "", "replicas": 1}
    assert mode_text(row) == series_text(row) == str(spec)
    assert parse_mode(str(spec)) == spec
    assert parse_mode(spec.label) == spec
    assert parse_mode(f"  {spec.label} ") == spec
    assert series_text({**row, "replicas": 2}) == f"{spec} dp2"
    assert series_text({**row, "replicas": 2, "variant": "dropout0"}) == f"{spec} dp2 [dropout0]"


@pytest.mark.parametrize("text, match", [
    ("fp32-dp2", r"'-dp2' is 2 data-parallel replicas, no part of a mode: give the mode "
                 r"'fp32' and --replicas 2"),
    ("aqsgd:2/4 dp4", r"'dp4' is 4 data-parallel replicas.*'aqsgd:2/4' and --replicas 4"),
    ("aqsgd+gc-qadam-fw2-bw4-dp2", r"give the mode 'aqsgd\+gc-qadam-fw2-bw4' and --replicas 2"),
    ("directq:2/4 [dropout0]", r"'\[dropout0\]' is a variant.*give the mode 'directq:2/4'"),
    ("aqsgd-qadam-fw2-bw4", r"only aqsgd\+gc selects a gradient compressor"),
    ("aqsgd-fw9-bw4", r"fw_bits must be in 1\.\.8, got 9"),
])
def test_a_layout_or_variant_in_a_mode_is_refused_naming_what_sets_it(text, match):
    with pytest.raises(ValueError, match=match):
        parse_mode(text)
