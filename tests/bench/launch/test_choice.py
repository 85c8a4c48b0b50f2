"""Launcher choice (bench.launch.choice): unknown names refused, every launcher found by
the name its state file records."""

from __future__ import annotations

import pytest

from bench.launch.choice import (
    FACTORIES,
    TEARDOWNS,
    choose_launcher,
    launcher_factory,
    state_teardown,
)


@pytest.mark.timeout(60)
def test_choose_launcher_refuses_unknown_names():
    # not under capsys: bench.launch.local binds sys.stderr when first imported
    with pytest.raises(ValueError, match="launcher must be one of auto, netns, docker, local"):
        choose_launcher("kubernetes")
    assert choose_launcher("local").name == "local"


def test_every_launcher_is_found_by_the_name_it_records():
    for name in FACTORIES:
        assert launcher_factory(name).name == name
    for name in TEARDOWNS:
        assert callable(state_teardown(name)) and name in FACTORIES
    with pytest.raises(ValueError, match="expected one of docker, local, netns, ssh, got "
                                         "'export'"):
        state_teardown("export")  # the multihost planner writes no state file
