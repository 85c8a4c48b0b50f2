"""`python -m bench.net.probe serve|measure ...`: the probe's server and client
(bench.net.probe.wire), as the launchers start them once per link."""

from bench.net.probe.wire import main

main()
