"""A mode listed twice is refused where it is listed (bench.harness.modes.first_repeat):
on the command line naming --modes and both spellings, in a sweep file naming the file
and the field of its second place (`aqsgd` beside `aqsgd:2/4`, or beside bits [2, 4]),
and in a SweepSpec built in code; exit 2 before anything runs."""

from __future__ import annotations

import pytest

from bench.__main__ import main
from bench.harness.modes import first_repeat, parse_mode
from bench.harness.sweep import SweepSpec, Variant, Workload, load_sweep

pytestmark = pytest.mark.timeout(120)


def test_first_repeat_finds_one_mode_in_two_spellings():
    modes = [parse_mode(t) for t in ("fp32", "aqsgd", "bf16", "aqsgd-fw2-bw4")]
    assert first_repeat(modes) == (1, 3)
    assert first_repeat(modes[:3]) is None
    assert first_repeat([parse_mode("aqsgd:2/4"), parse_mode("aqsgd:4/8")]) is None


def test_the_command_line_refuses_a_mode_given_twice(capsys, tmp_path):
    code = main(["run", "--scenario", "100mbps", "--modes", "fp32", "aqsgd", "aqsgd:2/4",
                 "--dry-run", "--launcher", "local", "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --modes 'aqsgd:2/4': mode aqsgd:2/4, given already as 'aqsgd': "
                   "each mode runs once (--repeats N measures it N times)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("body", "field", "text"), [
    ("modes: [fp32, aqsgd, \"aqsgd:2/4\"]\n", "modes[2]",
     "'aqsgd:2/4' is mode aqsgd:2/4, which modes[1] lists already"),
    ("modes: [\"aqsgd:4/8\", aqsgd]\nbits: [[2, 4], [4, 8]]\n", "modes[1]",
     "'aqsgd' is mode aqsgd:4/8, which modes[0] lists already"),
    ("modes: [fp32, aqsgd]\nvariants: [{name: d0, modes: [fp32, fp32], "
     "workload: {dropout: 0.0}}]\n", "variants[0].modes[1]",
     "'fp32' is mode fp32, which variants[0].modes[0] lists already"),
])
def test_a_sweep_file_refuses_a_mode_listed_twice(tmp_path, body, field, text):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\nscenarios: [100mbps]\n" + body)
    with pytest.raises(ValueError) as err:
        load_sweep(path)
    message = str(err.value)
    assert "twice.yaml" in message and f"'{field}'" in message and text in message


def test_a_sweep_built_in_code_refuses_a_repeated_mode():
    fp32, aqsgd = parse_mode("fp32"), parse_mode("aqsgd:2/4")
    with pytest.raises(ValueError, match=r"SweepSpec modes must not repeat a mode .* got "
                                         r"aqsgd:2/4 twice"):
        SweepSpec("s", ("100mbps",), (aqsgd, fp32, aqsgd))
    variant = Variant((fp32, fp32), Workload(variant="d0", dropout=0.0))
    with pytest.raises(ValueError, match=r"variant 'd0''s modes must not repeat a mode"):
        SweepSpec("s", ("100mbps",), (fp32,), variants=(variant,))
