"""Docker teardown by name (bench.launch.docker.state) with a fake client: exactly the
recorded names, cleanup of a Docker state file, the daemon the state file records."""

from __future__ import annotations

import json

import pytest

from bench.launch.docker import teardown_docker
from bench.launch.state import cleanup

pytestmark = pytest.mark.docker


class _NotFound(Exception):
    pass


class _Fake:
    """A docker client's containers/networks/volumes collections, by name."""

    def __init__(self, present):
        self.present, self.removed = set(present), []

    def get(self, name):
        if name not in self.present:
            raise _NotFound(name)
        fake = self

        class Obj:
            def remove(self, **kw):
                fake.removed.append(name)
                fake.present.discard(name)

        return Obj()


def test_teardown_removes_exactly_the_recorded_names(monkeypatch):
    import docker

    monkeypatch.setattr(docker.errors, "NotFound", _NotFound)
    client = type("C", (), {})()
    client.containers = _Fake({"aqd1-h0", "someone-else"})
    client.networks = _Fake({"aqd1-net"})
    client.volumes = _Fake(set())
    removed = teardown_docker({"containers": ["aqd1-h0", "aqd1-h1"], "networks": ["aqd1-net"],
                               "volumes": ["aqd1-cache"]}, client)
    assert removed == ["container aqd1-h0", "network aqd1-net"]
    assert client.containers.present == {"someone-else"}


def test_cleanup_of_a_docker_state_file_goes_through_teardown_docker(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("bench.launch.docker.state.teardown_docker",
                        lambda state: seen.append(state) or ["container x"])
    path = tmp_path / "aqd12345.json"
    path.write_text(json.dumps({"launcher": "docker", "prefix": "aqd12345",
                                "containers": ["x"], "networks": [], "volumes": []}))
    assert cleanup([path]) == ["container x"] and not path.exists()
    assert seen[0]["containers"] == ["x"]


def test_teardown_of_a_state_file_talks_to_the_daemon_it_records(monkeypatch):
    # `make net-cleanup` from a shell whose DOCKER_HOST is another daemon's, or unset
    import bench.launch.docker.state as docker_state
    import docker

    monkeypatch.setattr(docker.errors, "NotFound", _NotFound)
    seen = []

    def client(environment):
        seen.append(environment.get("DOCKER_HOST"))
        fake = type("C", (), {})()
        fake.containers = fake.networks = fake.volumes = _Fake(set())
        return fake

    monkeypatch.setattr(docker_state, "docker_client", client)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/someone-else.sock")
    names = {"containers": ["aqd1-h0"], "networks": [], "volumes": []}
    assert teardown_docker({**names, "docker_host": "unix:///run/suite.sock"}) == []
    assert teardown_docker({**names, "docker_host": None}) == []  # the default socket
    assert seen == ["unix:///run/suite.sock", None]
