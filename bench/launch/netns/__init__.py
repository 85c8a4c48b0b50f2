"""The network-namespace launcher: one namespace per emulated host on a bridge, links
shaped with tc, removal by exact recorded names.

    from bench.launch.netns import NetnsLauncher
    with NetnsLauncher(load_scenario("100mbps"), n_hosts=2) as hosts: ...

launcher.py (NetnsLauncher), names.py (every name and address of a run), topology.py
(namespaces, switch, veths, delay line), cgroups.py (the straggler hosts' CPU cgroups),
shaping.py (the host shaping plan rendered on the veths or TUNs), state.py (its state
file, and `teardown_state`, which bench.launch.choice names for state files of
"netns"). May import the core of bench/launch, bench.net and aqsgd.filecache; no other
launcher.
"""

from bench.launch.netns.launcher import NetnsLauncher, require_netns

__all__ = ["NetnsLauncher", "require_netns"]
