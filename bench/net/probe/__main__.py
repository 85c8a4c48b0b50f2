"""`python -m bench.net.probe serve|measure ...`: the probe's server and client
(bench.net.probe.wire), as the launchers start them once per link; `stream-serve|
stream-send ...`: the time-resolved probe (bench.net.probe.stream)."""

import sys

from bench.net.probe import stream, wire

if len(sys.argv) > 1 and sys.argv[1] in stream.STREAM_COMMANDS:
    stream.main()
else:
    wire.main()
