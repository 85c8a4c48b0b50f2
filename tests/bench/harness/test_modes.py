"""Mode syntax (bench.harness.modes): bad modes name the field; defaults and labels."""

from __future__ import annotations

import pytest

from bench.harness.modes import DEFAULT_GRID, parse_mode

pytestmark = pytest.mark.timeout(60)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("text, match", [
    ("aqsgd:9/4", r"fw_bits must be in 1\.\.8, got 9"),
    ("directq:4/0", r"bw_bits must be in 1\.\.8, got 0"),
    ("zstd", r"mode must be one of fp32, directq, tahquant, aqsgd, aqsgd-adaptive, "
             r"aqsgd-lowbits, aqsgd\+gc"),
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
