"""The half-precision transport modes bf16 and fp16 (aqsgd/compress/modes/half.py): the
names a sweep takes, the bytes they put on the wire (half of fp32's payload, both
directions), the performance model's bytes for them, the speed-up columns and figures
over bf16, and a real smoke run whose held-out loss stays beside fp32's."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from report_fixtures import write_fixture_cell

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import EVAL_DTYPE, message_spec
from aqsgd.compress.modes.base import Comparison
from aqsgd.compress.registry import (
    COMPARISONS,
    SPEEDUP_REFERENCES,
    RegistryError,
    build_registries,
)
from aqsgd.compress.wire import message_nbytes, spec_nbytes
from aqsgd.model.config import PRESETS
from bench.harness.cells import run_config
from bench.harness.defaults import bench_workload
from bench.harness.modes import DEFAULT_GRID, parse_mode
from bench.harness.paper import model_configs
from bench.harness.sweep import CellSpec, SweepSpec, Workload, load_sweep
from bench.net.scenario import load_scenario
from bench.perfmodel.predict import predict
from bench.perfmodel.profile import load_profile
from bench.perfmodel.project import project
from bench.perfmodel.whatif import workload_on
from bench.report.convergence import write_convergence_report
from bench.report.paper import claims_table, draw_paper_figures
from bench.report.plots import make_figures
from bench.report.quality import eval_curves, quality_table, seed_bands
from bench.report.summary import summarize
from bench.report.tables import format_table, write_report
from bench.report.timetoquality import series_facts, step_times, time_to_quality
from bench.results.files import load_results

HEADER_FIELD_BYTES = 8  # int64 header fields: [format, epoch, n_raw], then one id a row


# --- the modes and their names -----------------------------------------------------------------
def test_bf16_and_fp16_cast_both_directions_on_mode_none():
    for name, dtype in (("bf16", "bf16"), ("fp16", "fp16")):
        c = COMPARISONS[name]
        assert (c.forward, c.backward, c.dtype) == ("none", "none", dtype)
        assert not c.takes_bits and not c.data_parallel
        config = run_config(CellSpec("100mbps", parse_mode(name), Workload()), Path("/out"))
        assert (config.forward.mode, config.backward.mode) == ("none", "none")
        assert config.forward.dtype == config.backward.dtype == dtype
    assert SPEEDUP_REFERENCES == ("fp32", "bf16")


def test_sweep_names_parse_and_bits_are_refused():
    for name in ("bf16", "fp16"):
        mode = parse_mode(name)
        assert (str(mode), mode.label, mode.fw_bits) == (name, name, None)
    with pytest.raises(ValueError, match="mode bf16 takes no bit widths"):
        parse_mode("bf16:2/4")
    with pytest.raises(ValueError, match="only aqsgd\\+gc selects a gradient compressor"):
        parse_mode("fp16/qadam")


def test_a_sweep_file_runs_bf16_fp16_and_bf16_with_aqsgd_gc_replicas(tmp_path):
    path = tmp_path / "half.yaml"
    path.write_text("name: half\nscenarios: [100mbps]\n"
                    "modes: [fp32, bf16, fp16, \"aqsgd+gc:2/4\"]\n")
    names = [c.name for c in load_sweep(path).cells()]
    assert names == ["100mbps__fp32", "100mbps__bf16", "100mbps__fp16", "100mbps__fp32-dp2",
                     "100mbps__bf16-dp2", "100mbps__aqsgd+gc-qadam-fw2-bw4-dp2"]
    # without bf16 in the sweep, no bf16 reference appears (as before)
    path.write_text("name: half\nscenarios: [100mbps]\nmodes: [fp32, \"aqsgd+gc:2/4\"]\n")
    assert [c.name for c in load_sweep(path).cells()] == [
        "100mbps__fp32", "100mbps__fp32-dp2", "100mbps__aqsgd+gc-qadam-fw2-bw4-dp2"]


def test_bench_run_default_grid_has_bf16_and_its_dp_reference():
    sc = load_scenario("100mbps")
    spec = SweepSpec("b", ("100mbps",), tuple(parse_mode(m) for m in DEFAULT_GRID),
                     bench_workload(sc, Workload()))
    shapes = {c.name: (c.workload.stages, c.workload.replicas) for c in spec.cells()}
    assert "bf16" in DEFAULT_GRID and "fp16" not in DEFAULT_GRID
    assert shapes["100mbps__bf16"] == (4, 1) and shapes["100mbps__bf16-dp2"] == (2, 2)


def test_shipped_paper_and_convergence_sweeps_run_bf16():
    paper = {c.name for c in load_sweep("scenarios/sweeps/paper.yaml").cells()}
    assert {f"{s}__bf16" for s in ("10gbps", "1gbps", "500mbps", "300mbps", "100mbps")} <= paper
    conv = {c.name for c in load_sweep("scenarios/sweeps/convergence.yaml").cells()}
    assert {"loopback__bf16__s1", "loopback__bf16-dp2__s3"} <= conv
    regress = load_sweep("scenarios/sweeps/regress.yaml")  # the baseline stays as it is
    assert not any(c.mode.name in ("bf16", "fp16") for c in regress.cells())


def test_a_speedup_reference_that_codes_rows_is_refused():
    from aqsgd.compress.modes import directq, none

    module = type(none)("bad_reference")
    module.COMPARISONS = (Comparison("dq-ref", rank=9, forward="directq", backward="directq",
                                     speedup_reference=True),)
    with pytest.raises(RegistryError, match="'dq-ref' is a speed-up reference, so it must "
                                            "code nothing.*forward 'directq'"):
        build_registries([none, directq, module], [])


# --- bytes on the wire --------------------------------------------------------------------------
def _step_bytes(mode: str, workload: Workload, training: bool = True) -> tuple[int, int]:
    """(all bytes, header bytes) one GPipe step of `mode`'s cell sends over every stage
    boundary, forward and backward, as the pipeline's compressors code them (steady
    state: after the warm-up epoch)."""
    config = run_config(CellSpec("100mbps", parse_mode(mode), workload), Path("/out"))
    model, p = config.model, config.pipeline
    sample = (model.seq_len, model.n_embd)
    gen = torch.Generator().manual_seed(0)
    total = headers = 0
    for cfg, kind in ((config.forward, "activation"), (config.backward, "gradient")):
        for boundary in range(p.stages - 1):
            send = make_compressor(cfg, "send", sample, 64, kind=kind, seed=boundary)
            recv = make_compressor(cfg, "recv", sample, 64, kind=kind, seed=boundary)
            send.set_epoch(cfg.warmup_epochs)
            recv.set_epoch(cfg.warmup_epochs)
            for k in range(p.num_micro_batches):
                ids = torch.arange(k * p.micro_batch_size, (k + 1) * p.micro_batch_size)
                x = torch.randn(p.micro_batch_size, *sample, generator=gen)
                spec = recv.wire_spec(tuple(x.shape), ids, training=training)
                msg = send.encode(x, ids, training=training)
                assert [(tuple(t.shape), t.dtype) for t in msg] == spec
                y = recv.decode(msg, ids, training=training)
                assert y.dtype == torch.float32 and y.shape == x.shape
                total += message_nbytes(msg)
                headers += message_nbytes(msg[:1])
    return total, headers


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_a_half_cell_sends_half_of_fp32s_payload_per_step(half):
    workload = Workload(preset="tiny-4", stages=4)  # the 100mbps bench cell
    fp32, fp32_headers = _step_bytes("fp32", workload)
    ours, headers = _step_bytes(half, workload)
    assert headers == fp32_headers == 3 * 2 * 4 * HEADER_FIELD_BYTES * (3 + 16)
    assert ours - headers == (fp32 - fp32_headers) // 2
    # 3 boundaries x 2 directions x 4 micro-batches of 16 x 64 x 128 elements, 2 bytes each
    assert ours - headers == 3 * 2 * 4 * 16 * 64 * 128 * 2


def test_evaluation_messages_of_a_half_cell_travel_in_fp32():
    workload = Workload(preset="tiny-4", stages=4)
    assert _step_bytes("bf16", workload, training=False) == _step_bytes("fp32", workload,
                                                                        training=False)
    config = run_config(CellSpec("100mbps", parse_mode("bf16"), workload), Path("/out"))
    spec = message_spec(config.forward, (2, 64, 128), 2, training=False)
    assert spec[1] == ((2, 64, 128), EVAL_DTYPE)
    with pytest.raises(ValueError, match="evaluation message sends every row raw"):
        message_spec(run_config(CellSpec("s", parse_mode("aqsgd"), workload),
                                Path("/out")).forward, (2, 64, 128), 0, training=False)
    # the stage input of an evaluation is the activation itself, not its bf16 rounding
    send = make_compressor(config.forward, "send", (64, 128), 8)
    recv = make_compressor(config.forward, "recv", (64, 128), 8)
    x, ids = torch.randn(2, 64, 128), torch.tensor([0, 1])
    assert torch.equal(recv.decode(send.encode(x, ids, training=False), ids, training=False), x)
    trained = recv.decode(send.encode(x, ids), ids)
    assert torch.equal(trained, x.to(torch.bfloat16).float()) and not torch.equal(trained, x)


def test_the_performance_model_sends_the_compressors_bytes_for_bf16():
    cpu = load_profile("cpu-2core")
    configs = model_configs("tiny-4", 4, 1, 16, 4, ["fp32", "bf16"])
    work = {m: workload_on(c, load_scenario("100mbps"), cpu) for m, c in configs.items()}
    shape = (16, PRESETS["tiny-4"].seq_len, PRESETS["tiny-4"].n_embd)
    header = HEADER_FIELD_BYTES * (3 + 16)
    for mode, w in work.items():
        cfg = configs[mode].forward
        send = make_compressor(cfg, "send", shape[1:], 16)
        real = message_nbytes(send.encode(torch.randn(shape), torch.arange(16)))
        assert w.act_bytes == w.grad_bytes == real == spec_nbytes(message_spec(cfg, shape, 16))
    assert work["bf16"].act_bytes - header == (work["fp32"].act_bytes - header) // 2
    fp32, bf16 = (predict(work[m], cpu) for m in ("fp32", "bf16"))
    # every message of a step is one of those: 3 boundaries x 2 directions x 4 micro-batches
    assert bf16.bytes_per_step == 24 * work["bf16"].act_bytes
    assert fp32.bytes_per_step == 24 * work["fp32"].act_bytes
    assert bf16.step_s < fp32.step_s  # communication-bound at 100 Mbit/s: fewer bytes win


def test_the_projection_shows_speedups_over_fp32_and_bf16():
    gpu = load_profile("a100-bf16")
    configs = model_configs("gpt2-xl", 8, 1, 1, 32, ["fp32", "bf16", "aqsgd:4/8"])
    table = project(configs, gpu, load_scenario("10gbps"), rates_mbit=(10_000.0, 100.0))
    at = table.set_index(["mode", "rate_mbit"])
    assert at.loc[("bf16", 100.0), "speedup_vs_bf16"] == pytest.approx(1.0)
    assert at.loc[("fp32", 100.0), "speedup_vs_bf16"] < 1.0 < at.loc[("bf16", 100.0),
                                                                      "speedup_vs_fp32"]
    aq = at.loc[("aqsgd:4/8", 100.0)]
    assert aq["speedup_vs_bf16"] == pytest.approx(
        aq["speedup_vs_fp32"] / at.loc[("bf16", 100.0), "speedup_vs_fp32"])
    no_bf16 = project({"fp32": configs["fp32"]}, gpu, load_scenario("10gbps"),
                      rates_mbit=(100.0,))
    assert no_bf16["speedup_vs_bf16"].isna().all()


# --- tables, figures, reports -------------------------------------------------------------------
def _throughput_cells(root: Path, with_bf16: bool = True) -> Path:
    """100mbps cells: fp32 at 0.4 s a step, bf16 at 0.25, aqsgd 2/4 at 0.1 (64 samples a
    step); the same at 1gbps, twice as fast; fp32 unshaped at 0.05 s."""
    sweep = root / "sweep"
    for scenario, rate, scale in (("100mbps", 100.0, 1.0), ("1gbps", 1000.0, 0.5)):
        cells = [("fp32", None, None, 0.4, 4000), ("aqsgd", 2, 4, 0.1, 300)]
        if with_bf16:
            cells.append(("bf16", None, None, 0.25, 2000))
        for mode, fw, bw, step, nbytes in cells:
            write_fixture_cell(sweep, mode=mode, fw=fw, bw=bw, scenario=scenario,
                               rate_mbit=rate, step_time_s=step * scale,
                               warmup_step_time_s=0.4 * scale, act_bytes=nbytes)
    write_fixture_cell(sweep, mode="fp32", scenario="loopback", rate_mbit=None,
                       shaped=False, launcher="local", step_time_s=0.05)
    return sweep


def test_summary_and_table_show_speedups_over_fp32_and_bf16(tmp_path):
    sweep = _throughput_cells(tmp_path)
    summary = summarize([sweep]).set_index(["scenario", "mode"])
    aq = summary.loc[("100mbps", "aqsgd")]
    assert aq["speedup_vs_fp32"] == pytest.approx(4.0)  # 0.4 s / 0.1 s
    assert aq["speedup_vs_bf16"] == pytest.approx(2.5)  # 0.25 s / 0.1 s
    # end to end: 2 warm-up steps at 0.4 s and 4 measured ones
    assert aq["speedup_e2e_vs_bf16"] == pytest.approx((0.8 + 4 * 0.25) / (0.8 + 4 * 0.1))
    assert summary.loc[("100mbps", "bf16"), "speedup_vs_bf16"] == pytest.approx(1.0)
    assert summary.loc[("100mbps", "fp32"), "speedup_vs_bf16"] == pytest.approx(0.625)
    assert math.isnan(summary.loc[("loopback", "fp32"), "speedup_vs_bf16"])
    text = format_table(summarize([sweep]))
    header = text.splitlines()[0]
    assert "speed-up vs bf16 (steady state)" in header
    assert "end-to-end vs bf16 (warm-up incl.)" in header
    row = next(line for line in text.splitlines() if "100mbps" in line and "aqsgd" in line)
    assert "4.00x" in row and "2.50x" in row
    bf16_row = next(line for line in text.splitlines() if "100mbps" in line and "bf16" in line)
    assert bf16_row.split()[:2] == ["100mbps", "bf16"]
    report = write_report(sweep, summarize([sweep]), []).read_text()
    assert "| speed-up vs bf16 (steady state) |" in report and "over bf16" in report


def test_without_a_bf16_cell_the_bf16_columns_say_dash(tmp_path):
    sweep = _throughput_cells(tmp_path, with_bf16=False)
    summary = summarize([sweep])
    assert summary["speedup_vs_bf16"].isna().all()
    lines = format_table(summary).splitlines()
    header = lines[0]
    start = header.index("speed-up vs bf16")
    row = next(line for line in lines if "100mbps" in line and "aqsgd" in line)
    assert row[start:start + 1] == "-" and "4.00x" in row


def test_figures_over_bf16_are_drawn_only_with_a_bf16_cell(tmp_path):
    sweep = _throughput_cells(tmp_path)
    names = {p.name for p in make_figures([sweep], tmp_path / "figures")}
    assert {"speedup.png", "speedup_vs_bf16.png", "speedup_vs_bf16.svg"} <= names
    svg = (tmp_path / "figures" / "speedup_vs_bf16.svg").read_text()
    assert "speed-up over bf16" in svg and "bf16" in svg
    legend = (tmp_path / "figures" / "throughput_vs_bandwidth.svg").read_text()
    assert "bf16" in legend  # a series of its own in every figure by mode
    other = _throughput_cells(tmp_path / "other", with_bf16=False)
    names = {p.name for p in make_figures([other], tmp_path / "other-figures")}
    assert "speedup.png" in names and "speedup_vs_bf16.png" not in names


def test_paper_figures_and_claims_speak_of_bf16(tmp_path):
    sweep = _throughput_cells(tmp_path)
    figures = draw_paper_figures(sweep, tmp_path / "paper", conv_dir=tmp_path / "none")
    assert {"paper_speedup.png", "paper_speedup_vs_bf16.png"} <= {p.name for p in figures}
    from bench.report.claims import load_claims
    from bench.report.convergence import analyse

    claims = load_claims()
    conv = analyse(tmp_path / "none", sweep, claims)
    _, rows = claims_table(summarize([sweep]), claims, conv)
    speedup = next(r for r in rows if r[0].startswith("Up to 4.3x"))
    assert "4.00x steady state" in speedup[2] and "2.50x over bf16 there" in speedup[2]


def _convergence_cells(root: Path) -> Path:
    conv = root / "conv"
    for seed in (1, 2):
        for mode, fw, bw, losses in (("fp32", None, None, [5.0, 4.0, 3.0, 2.0]),
                                     ("bf16", None, None, [5.0, 4.0, 3.0, 2.001]),
                                     ("aqsgd", 2, 4, [5.0, 4.0, 2.0, 2.01])):
            write_fixture_cell(conv, mode=mode, fw=fw, bw=bw, scenario="loopback",
                               rate_mbit=None, shaped=False, launcher="local", seed=seed,
                               epochs=3, steps_per_epoch=2,
                               eval_losses=[x + 0.001 * seed for x in losses])
    return conv


def test_convergence_report_has_bf16_and_its_time_to_quality_heatmap(tmp_path):
    conv = _convergence_cells(tmp_path)
    sweep = _throughput_cells(tmp_path)
    metrics = load_results([conv])
    curves = eval_curves(metrics)
    quality = quality_table(curves).set_index("series")
    assert quality.loc["bf16", "gap_pct"] == pytest.approx(100 * 0.001 / 2.0015, rel=1e-6)
    ttq = time_to_quality(quality.reset_index(), seed_bands(curves),
                          series_facts(metrics, curves), step_times(load_results([sweep])))
    at = ttq.set_index(["series", "scenario"])
    # bf16 reaches fp32's loss at the last evaluation (step 6) like fp32; aqsgd at step 4
    assert at.loc[("bf16", "100mbps"), "status"] == "reached"
    assert at.loc[("bf16", "100mbps"), "time_s"] == pytest.approx(2 * 0.4 + 4 * 0.25)
    report = write_convergence_report(conv, sweep, tmp_path / "report", quiet=True)
    text = report.read_text()
    assert "| bf16 |" in text
    assert "time_to_quality_vs_bf16.png" in text and "time_to_quality.png" in text
    svg = (tmp_path / "report" / "time_to_quality_vs_bf16.svg").read_text()
    assert "bf16" in svg


# --- a real run ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(400)
def test_smoke_run_bf16_and_fp16_halve_the_bytes_and_keep_fp32s_held_out_loss(tmp_path):
    from bench.harness.run import run_sweep

    workload = Workload(steps=2, train_samples=64, eval_samples=64, timeout_s=150,
                        dist_timeout_s=60, init_from=None)
    spec = SweepSpec("half", ("100mbps",), tuple(parse_mode(m) for m in
                                                ("fp32", "bf16", "fp16")), workload)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher="local", quiet=True, echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok"] * 3
    summary = summarize([out]).set_index("mode")
    # 2 stages, 4 micro-batches of 16 x 64 x 128 each way, plus 8 int64 headers of 3 + 16
    header = 2 * 4 * HEADER_FIELD_BYTES * (3 + 16)
    fp32 = summary.loc["fp32", "bytes_per_step"]
    assert fp32 == header + 2 * 4 * 16 * 64 * 128 * 4
    for half in ("bf16", "fp16"):
        assert summary.loc[half, "bytes_per_step"] - header == (fp32 - header) / 2
        # 3 steps from random weights: the transport's rounding moves the held-out loss
        # (evaluated in fp32 between the stages) by a few 1e-7 of it here
        gap = abs(summary.loc[half, "final_eval_loss"] - summary.loc["fp32", "final_eval_loss"])
        assert gap < 1e-4 * summary.loc["fp32", "final_eval_loss"], (half, gap)
    frame = load_results([out])
    evals = frame[(frame["kind"] == "eval") & frame["eval_loss"].notna()]
    assert set(evals["mode"]) == {"fp32", "bf16", "fp16"}
    assert pd.notna(summary.loc["bf16", "speedup_vs_bf16"])


def test_figure_legends_read_in_rank_order_with_bf16_after_the_compressing_modes():
    from bench.report.plots import mode_order

    labels = ["bf16 x2 dp", "aqsgd+gc-qadam-fw2-bw4 x2 dp", "bf16", "fp16", "fp32",
              "aqsgd-lowbits-fw2-bw4", "aqsgd-fw2-bw4", "directq-fw2-bw4", "gone-fw2-bw4"]
    assert mode_order(labels) == ["fp32", "directq-fw2-bw4", "aqsgd-fw2-bw4",
                                  "aqsgd-lowbits-fw2-bw4", "aqsgd+gc-qadam-fw2-bw4 x2 dp",
                                  "bf16", "bf16 x2 dp", "fp16", "gone-fw2-bw4"]
