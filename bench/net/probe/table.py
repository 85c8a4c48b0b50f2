"""The probe table: one line per probed link (configured and achieved rate, their ratio,
the host's ceiling, configured and measured round trip, HOST-LIMITED where the verdict
says so), as plain text for the console and for error messages.

Drawn by rich, which `format_table` loads when called: importing this module loads the
standard library only, as the probe's server and client start once per link.
"""

from __future__ import annotations

import io

from bench.net.probe.record import ProbeRecord

__all__ = ["format_table"]

TABLE_WIDTH = 120  # wide enough that rich never wraps a row


def format_table(records: list[ProbeRecord]) -> str:
    """The probe table as plain text: a header line, then one line per link (ending in
    HOST-LIMITED where the host, not the shaping, limits it), then the units."""
    # imported here: the probe's server and client start once per probed link and need
    # not load rich
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, caption="rates: TCP payload Mbit/s; RTT: ms",
                  caption_justify="left")
    table.add_column("link")
    for name in ("configured", "achieved", "ratio", "ceiling", "RTT cfg", "RTT"):
        table.add_column(name, justify="right")
    table.add_column("")  # the HOST-LIMITED marker
    for r in records:
        want, ceiling = r.rate_mbit_configured, r.rate_mbit_ceiling
        table.add_row(f"{r.src} -> {r.dst}",
                      "unshaped" if want is None else f"{want:.1f}",
                      f"{r.rate_mbit_achieved:.1f}",
                      "-" if want is None else f"{r.rate_mbit_achieved / want:.3f}",
                      "-" if ceiling is None else f"{ceiling:.1f}",
                      f"{r.rtt_ms_configured:.2f}", f"{r.rtt_ms:.2f}",
                      "HOST-LIMITED" if r.host_limited else "")
    out = io.StringIO()
    Console(file=out, width=TABLE_WIDTH, markup=False, highlight=False,
            color_system=None).print(table)
    # rich pads every line to the table's width; callers embed the text in messages
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
