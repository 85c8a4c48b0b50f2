"""The Docker launcher: one container per rank on a network the run creates, each
container's egress shaped with tc inside it, removal by exact recorded names.

    from bench.launch.docker import DockerLauncher
    with DockerLauncher(load_scenario("100mbps"), n_hosts=2, state_dir=d) as hosts: ...

launcher.py (DockerLauncher), spec.py (names, addresses, GPUs, environment and the host
shaping plan rendered in each container, as data), checks.py (the daemon's client,
netem test, delay-line and interpreter checks), state.py (its state file, and
`teardown_state`, which bench.launch.choice names for state files of "docker"),
compose.py (the same run exported as a compose file). May import the core of
bench/launch, bench.net, bench (REPO_ROOT), aqsgd.filecache and aqsgd.compress.plugins
(the cells' plug-ins, checked in a container); no other launcher.
"""

from bench.launch.docker.launcher import DockerLauncher
from bench.launch.docker.state import teardown_docker

__all__ = ["DockerLauncher", "teardown_docker"]
