"""Plug-ins in the harness: `--plugin` and a sweep file's `plugins:` load them before the
modes are read, a plug-in cell's identity names its plug-in (an edit re-measures its
cells only, the built-ins' keys never change), its run config carries what the workers
load, and `bench model` / profiles treat it like a built-in or mark it unprofiled."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from harness_helpers import SMOKE

from aqsgd.compress.registry import COMPARISONS, PLUGINS, load_plugins, unload_plugins
from bench.__main__ import main
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, SweepSpec, load_sweep
from bench.perfmodel.measure import time_compressors
from bench.perfmodel.profile import CompressProfile, load_profile
from specfile import SpecError

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "randproj.py"


@pytest.fixture
def unload():
    """Unloads whatever plug-ins the test loaded (the tables are the process's)."""
    yield
    unload_plugins(list(PLUGINS.values()))


def _spec(*modes: str) -> SweepSpec:
    return SweepSpec("plug", ("100mbps",), tuple(parse_mode(m) for m in modes), SMOKE)


def test_editing_a_plugin_changes_the_identity_of_its_cells_only(tmp_path, unload):
    builtin = {c.name: c.key for c in _spec("fp32", "aqsgd:2/4").cells()}
    copy = tmp_path / "randproj.py"
    copy.write_text(EXAMPLE.read_text())
    load_plugins([str(copy)])
    first = {c.name: c.key for c in _spec("fp32", "aqsgd:2/4", "randproj").cells()}
    assert {k: first[k] for k in builtin} == builtin  # loading it changes no other cell
    (cell,) = [c for c in _spec("randproj").cells()]
    assert cell.to_dict()["plugins"] == [{"module": "randproj", "version": "0.1",
                                          "sha256": PLUGINS["randproj"].sha256}]
    assert "plugins" not in _spec("fp32").cells()[0].to_dict()
    unload_plugins(list(PLUGINS.values()))
    copy.write_text(EXAMPLE.read_text().replace("rank = 2.5  #", "rank = 2.5  # edited;"))
    load_plugins([str(copy)])
    second = {c.name: c.key for c in _spec("fp32", "aqsgd:2/4", "randproj").cells()}
    changed = [name for name in second if second[name] != first[name]]
    assert changed == ["100mbps__randproj-fw4-bw8"]


def test_a_plugin_cells_run_config_names_what_its_workers_load(unload):
    (plugin,) = load_plugins([str(EXAMPLE)])
    config = run_config(CellSpec("100mbps", parse_mode("randproj:2/4"), SMOKE), Path("/o"))
    assert config.plugins == (plugin,) and config.forward.mode == "randproj"
    assert config.to_dict()["plugins"] == [plugin.to_dict()]
    assert run_config(CellSpec("100mbps", parse_mode("fp32"), SMOKE), Path("/o")).plugins == ()
    overridden = dataclasses.replace(SMOKE, overrides={"plugins.x": 1})
    with pytest.raises(ValueError, match=r"unknown section 'plugins' \(known sections: "
                                         r"model, .*output\)"):
        run_config(CellSpec("100mbps", parse_mode("fp32"), overridden), Path("/o"))


def test_a_sweep_files_plugins_load_relative_to_it_before_its_modes(tmp_path, unload):
    folder = tmp_path / "sweeps"
    folder.mkdir()
    (folder / "randproj.py").write_text(EXAMPLE.read_text())
    path = folder / "plug.yaml"
    path.write_text("name: plug\nscenarios: [100mbps]\nmodes: [fp32, randproj:2/4]\n"
                    "plugins: [randproj.py]\n")
    spec = load_sweep(path)
    assert [str(m) for m in spec.modes] == ["fp32", "randproj:2/4"]
    assert PLUGINS["randproj"].source == str(folder / "randproj.py")
    unload_plugins(list(PLUGINS.values()))
    path.write_text("name: plug\nscenarios: [100mbps]\nmodes: [fp32]\nplugins: [gone.py]\n")
    with pytest.raises(SpecError, match=r"plug.yaml: field 'plugins': plug-in file .*gone.py does "
                                        r"not exist"):
        load_sweep(path)


def test_bench_run_with_a_plugin_adds_its_modes_to_the_default_grid(capsys, tmp_path,
                                                                     unload):
    out = tmp_path / "results"
    assert main(["run", "--scenario", "100mbps", "--launcher", "local", "--dry-run",
                 "--plugin", str(EXAMPLE), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "100mbps__randproj-fw4-bw8__local" in text and "100mbps__aqsgd-fw2-bw4" in text
    assert not out.exists()
    assert main(["run", "--scenario", "100mbps", "--dry-run", "--plugin",
                 str(tmp_path / "nope.py")]) == 2
    assert "--plugin: plug-in file" in capsys.readouterr().err


def test_a_colliding_plugin_is_refused_by_bench_run_naming_it(tmp_path, capsys, unload):
    clash = tmp_path / "clash.py"
    clash.write_text(EXAMPLE.read_text().replace('"randproj"', '"directq"'))
    assert main(["run", "--scenario", "100mbps", "--dry-run", "--plugin", str(clash)]) == 2
    err = capsys.readouterr().err
    assert f"--plugin: plug-in {clash}: activation mode 'directq' is declared by both" in err
    assert "directq" in COMPARISONS and COMPARISONS["directq"].forward == "directq"


def test_a_profile_without_a_plugins_entry_loads_and_bench_model_marks_its_row(
        capsys, unload):
    load_plugins([str(EXAMPLE)])
    profile = load_profile("cpu-2core")  # measured without it: not refused
    assert profile.compress.unprofiled(("randproj", "directq")) == ("randproj",)
    assert main(["model", "--preset", "tiny", "--stages", "2", "--micro-batch-size", "16",
                 "--micro-batches", "4", "--profile", "cpu-2core", "--scenario", "100mbps",
                 "--modes", "fp32", "randproj:4/8", "--json"]) == 0
    rows = {r["mode"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["randproj:4/8"]["unprofiled"] == ["randproj"] and rows["fp32"]["unprofiled"] == []
    # 4 bits a value forward (fp16 projections of a quarter of the width) vs fp32's 32
    assert rows["randproj:4/8"]["bytes_per_step"] < rows["fp32"]["bytes_per_step"] / 4
    assert main(["model", "--preset", "tiny", "--stages", "2", "--micro-batch-size", "16",
                 "--micro-batches", "4", "--profile", "cpu-2core", "--scenario", "100mbps",
                 "--modes", "randproj:4/8"]) == 0
    assert "randproj:4/8 (unprofiled: randproj)" in capsys.readouterr().out
    with_entry = CompressProfile(
        **{name: {**getattr(profile.compress, name), "randproj": 1e-9}
           for name in ("encode_s_per_element", "decode_s_per_element")},
        grad_s_per_element=profile.compress.grad_s_per_element)
    assert with_entry.unprofiled(("randproj",)) == ()
    with pytest.raises(SpecError, match="one entry per built-in mode"):
        CompressProfile(encode_s_per_element={"randproj": 1e-9})


def test_bench_profile_times_a_loaded_plugins_mode_like_the_builtins(unload):
    load_plugins([str(EXAMPLE)])
    enc, dec = time_compressors((2, 8, 64), repeats=1)
    assert enc["randproj"] > 0 and dec["randproj"] > 0 and set(enc) >= {"aqsgd", "directq"}
    with_it = CompressProfile(enc, dec, load_profile("cpu-2core").compress.grad_s_per_element)
    assert with_it.unprofiled(("randproj", "aqsgd")) == ()
