"""The paper's throughput figure from replayed cells: every stage waits a GPU profile's
times (`compute: replay:PROFILE`, docs/replay.md) while the messages and the shaped links
are real, beside the performance model's curve for the same setting and the published
claims. Made from result files only (bench.harness.paper_replay runs the sweep first).

    paths = draw_replay_figures(Path("results/paper-replay"), Path("results/paper-replay/paper"))

Rows: one per replayed cell (a cell of real compute is left out and counted). Each row's
model figure is the cell's own step (its run config, placement and host caps) predicted
with the replay profile's coding and link constants and the times the stages waited
(bench.perfmodel.validate.step_workload_of); the curve moves every link of that step to
each rate. Speed-ups divide replayed by replayed (or model by model): fp32 of the same
schedule, profile and link rate, never a measured cell of real compute. Files:
paper_replay.png and paper-replay.md (its tables name the profile).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from aqsgd.filecache import atomic_write_text
from aqsgd.train.replay import profile_reference
from bench.perfmodel.predict import predict, with_rate
from bench.perfmodel.profile import load_profile
from bench.perfmodel.validate import compute_source, load_cells, step_workload_of
from bench.report.claims import CLAIMS_FILE, find_claim, load_claims
from bench.report.markdown import markdown_table
from bench.report.paper import draw_slowdown_claim, draw_speedup_claims, rate_axes
from bench.report.plots import plt, save, series_color
from bench.report.summary import series_text

__all__ = ["CURVE_RATES_MBIT", "replay_rows", "model_curves", "draw_replay_figures"]

# the model's curve: the paper's bandwidths and between them, Mbit/s
CURVE_RATES_MBIT = tuple(float(r) for r in np.geomspace(10_000, 50, 25))
_KEY = ["schedule", "profile", "rate_mbit"]


def replay_rows(results: Path) -> tuple[pd.DataFrame, int]:
    """(one row per replayed cell under `results`, how many cells of real compute were
    left out). Columns: series, mode, schedule, profile, rate_mbit, samples/s measured
    and predicted, and the speed-ups over fp32 of the same schedule, profile and rate."""
    rows, real = [], 0
    profiles: dict[str, object] = {}
    for cell in load_cells([results]):
        source = compute_source(cell)
        reference = profile_reference(source)
        if reference is None:
            real += 1
            continue
        profile = profiles.setdefault(reference, load_profile(reference))
        work = step_workload_of(cell, profile)
        c = cell.record.cell
        row = c.to_dict()
        rows.append({
            "cell": cell.name, "series": series_text({**row, "variant": ""}), "mode": c.mode,
            "schedule": cell.record.schedule, "profile": profile.name, "source": source,
            "rate_mbit": c.rate_mbit, "stages": c.stages, "replicas": c.replicas,
            "measured_s": cell.step_s,
            "samples_s": work.samples_per_step / cell.step_s,
            "model_samples_s": predict(work, profile).throughput_samples_s})
    table = pd.DataFrame(rows)
    if table.empty:
        return table, real
    table = table[table["rate_mbit"].notna()].copy()
    for column in ("samples_s", "model_samples_s"):
        fp32 = table[table["mode"] == "fp32"].groupby(_KEY)[column].median()
        table[f"{column}_vs_fp32"] = [
            row[column] / fp32.get(tuple(row[k] for k in _KEY), math.nan)
            for _, row in table.iterrows()]
        fastest = table[table["mode"] == "fp32"].sort_values("rate_mbit").groupby(
            ["schedule", "profile"])[column].last()
        table[f"{column}_vs_fp32_fastest"] = [
            row[column] / fastest.get((row["schedule"], row["profile"]), math.nan)
            for _, row in table.iterrows()]
    return table.sort_values(["schedule", "series", "rate_mbit"], ascending=[True, True,
                                                                              False]), real


def model_curves(results: Path, rates: tuple[float, ...] = CURVE_RATES_MBIT) -> pd.DataFrame:
    """The model's samples/s of each replayed series and schedule at every rate of
    `rates` (every link of one of its cells' steps moved to the rate), with the speed-up
    over the model's fp32 of the same schedule and profile at that rate."""
    rows = []
    seen = set()
    profiles: dict[str, object] = {}
    for cell in load_cells([results]):
        reference = profile_reference(compute_source(cell))
        c = cell.record.cell
        key = (series_text({**c.to_dict(), "variant": ""}), cell.record.schedule, reference)
        if reference is None or key in seen:
            continue
        seen.add(key)
        profile = profiles.setdefault(reference, load_profile(reference))
        work = step_workload_of(cell, profile)
        for rate in rates:
            rows.append({"series": key[0], "mode": c.mode, "schedule": key[1],
                         "profile": profile.name, "rate_mbit": rate,
                         "samples_s": predict(with_rate(work, rate), profile)
                         .throughput_samples_s})
    curves = pd.DataFrame(rows)
    if curves.empty:
        return curves
    fp32 = curves[curves["mode"] == "fp32"].set_index(_KEY)["samples_s"]
    curves["vs_fp32"] = [r["samples_s"] / fp32.get(tuple(r[k] for k in _KEY), math.nan)
                         for _, r in curves.iterrows()]
    return curves


def _figure(table: pd.DataFrame, curves: pd.DataFrame, claims: list[dict], out: Path,
            title: str) -> list[Path]:
    schedules = list(dict.fromkeys(table["schedule"]))
    fig, axes = plt.subplots(len(schedules), 3, figsize=(19, 5 * len(schedules)),
                             squeeze=False, layout="constrained")
    for row, schedule in enumerate(schedules):
        mine = table[table["schedule"] == schedule]
        model = curves[curves["schedule"] == schedule]
        fp32_fast = mine[mine["mode"] == "fp32"].sort_values("rate_mbit")
        for series, rows in mine.groupby("series", sort=False):
            color = series_color(series)
            rows = rows.sort_values("rate_mbit")
            line = model[model["series"] == series].sort_values("rate_mbit")
            panels = (("samples_s", line["samples_s"]), ("samples_s_vs_fp32", line["vs_fp32"]),
                      ("samples_s_vs_fp32_fastest",
                       line["samples_s"] / fp32_fast["model_samples_s"].iloc[-1]
                       if len(fp32_fast) else line["samples_s"] * math.nan))
            for ax, (column, curve) in zip(axes[row], panels, strict=True):
                ax.plot(rows["rate_mbit"], rows[column], marker="o", color=color,
                        label=f"{series} (replayed)")
                ax.plot(line["rate_mbit"], curve, linestyle="--", color=color, alpha=0.7,
                        label=f"{series} (model)")
        draw_speedup_claims(axes[row][1], claims)
        axes[row][1].axhline(1.0, color="grey", linewidth=0.8)
        draw_slowdown_claim(axes[row][2], claims)
        rate_axes(axes[row][0], "samples/s", f"{schedule}: throughput")
        rate_axes(axes[row][1], "speed-up over fp32 at the same link (x)",
                  f"{schedule}: speed-up over fp32 (replayed over replayed)")
        rate_axes(axes[row][2], "throughput / fp32 throughput at the fastest link",
                  f"{schedule}: against fp32 at the fastest link")
    fig.suptitle(title)
    return save(fig, out, "paper_replay")


def _claims_rows(table: pd.DataFrame, claims: list[dict]) -> list[list[str]]:
    """Each speed claim beside the replayed and the modelled figure (AQ-SGD at the
    paper's bits, fw 4 / bw 8, where the cells have them)."""
    rows = []
    aqsgd = table[table["series"] == "aqsgd:4/8"]
    if aqsgd.empty:
        aqsgd = table[table["mode"] == "aqsgd"]
    claim = find_claim(claims, "max_speedup")
    if claim and not aqsgd.empty:
        best = aqsgd.loc[aqsgd["samples_s_vs_fp32"].idxmax()]
        rows.append([claim["text"], f"up to {claim['value']}x",
                     f"{best['samples_s_vs_fp32']:.2f}x ({best['series']}, {best['schedule']}, "
                     f"{best['rate_mbit']:g} Mbit/s)",
                     f"{best['model_samples_s_vs_fp32']:.2f}x"])
    claim = find_claim(claims, "slowdown_500mbps")
    if claim:
        at = aqsgd[aqsgd["rate_mbit"] == claim["rate_mbit"]]
        replayed = ", ".join(f"{r['samples_s_vs_fp32_fastest']:.2f} ({r['series']}, "
                             f"{r['schedule']})" for _, r in at.iterrows()) or (
            f"- (no AQ-SGD cell at {claim['rate_mbit']} Mbit/s)")
        modelled = ", ".join(f"{r['model_samples_s_vs_fp32_fastest']:.2f}"
                             for _, r in at.iterrows()) or "-"
        rows.append([claim["text"], f"{claim['value_low']:.2f}-{claim['value_high']:.2f}",
                     replayed, modelled])
    return rows


def draw_replay_figures(results: Path, out: Path, claims_path: Path = CLAIMS_FILE
                        ) -> list[Path]:
    """paper_replay.png and paper-replay.md under `out` from the replayed cells under
    `results`; a ValueError when there is none."""
    table, real = replay_rows(results)
    if table.empty:
        raise ValueError(f"no replayed cell with measured steps on a shaped link under "
                         f"{results}: run `make paper-replay` (or `bench run --compute "
                         f"replay:PROFILE`) first")
    claims = load_claims(claims_path)
    curves = model_curves(results)
    profiles = ", ".join(sorted(set(table["profile"])))
    sources = ", ".join(sorted(set(table["source"])))
    title = (f"{table['stages'].iloc[0]} stages, replayed compute ({sources}): measured "
             f"(solid) and the performance model (dashed)")
    out.mkdir(parents=True, exist_ok=True)
    figures = _figure(table, curves, claims, out, title)
    cols = ["rate_mbit", "schedule", "series", "samples_s", "model_samples_s",
            "samples_s_vs_fp32", "model_samples_s_vs_fp32"]
    body = [[f"{r['rate_mbit']:g}", r["schedule"], r["series"], f"{r['samples_s']:.3f}",
             f"{r['model_samples_s']:.3f}", f"{r['samples_s_vs_fp32']:.2f}x",
             f"{r['model_samples_s_vs_fp32']:.2f}x"] for _, r in table[cols].iterrows()]
    lines = ["# The paper's throughput figure from replayed cells", "",
             f"Results: `{results}`; profile: {profiles} (compute {sources}); every stage "
             f"waits the profile's times, messages and links are real (docs/replay.md). "
             f"Speed-ups divide replayed by replayed (model by model) at the same "
             f"schedule, profile and link rate."
             + (f" {real} cell(s) of real compute under `{results}` left out." if real
                else ""), "",
             markdown_table(["Mbit/s", "schedule", "mode", f"samples/s replayed ({profiles})",
                             f"samples/s model ({profiles})", "vs fp32 replayed",
                             "vs fp32 model"], body), "",
             "## Published claims (GPT2-XL, GPUs)", "",
             markdown_table(["claim", "paper", f"replayed ({profiles})",
                             f"model ({profiles})"], _claims_rows(table, claims)), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures if p.suffix == ".png"]
    atomic_write_text(out / "paper-replay.md", "\n".join(lines) + "\n")
    return [*figures, out / "paper-replay.md"]
