"""`python -m bench.launch probe|up` on bad input: exit 2 and one line naming the
scenario, the host count or the link, before any host is brought up (the launcher is
never built)."""

from __future__ import annotations

import pytest

from bench.launch import __main__ as launch_main


@pytest.fixture
def nothing_is_built(monkeypatch):
    def refuse(*args, **kwargs):
        pytest.fail("bad input must be refused before a launcher is built")

    monkeypatch.setattr(launch_main, "launcher_factory", refuse)


@pytest.mark.parametrize(("argv", "message"), [
    (["probe", "nosuch"], "error: no scenario 'nosuch' (looked for "),
    (["up", "nosuch.yaml"], "error: no scenario 'nosuch.yaml'"),
    (["probe", "100mbps", "--hosts", "8"],
     "error: cell of 8 stages x 1 replica(s) needs 8 hosts; scenario '100mbps' has 4"),
    (["probe", "100mbps", "--timeline", "5"],
     "error: --timeline: scenario 100mbps has no link with a schedule"),
    (["probe", "dynamic-halving", "--timeline", "5", "--link", "0", "3"],
     "error: --link 0 3: not a scheduled link of dynamic-halving on 2 hosts (scheduled: "
     "0 1, 1 0)"),
])
def test_bad_input_exits_2_before_anything_is_brought_up(argv, message, nothing_is_built,
                                                          capsys):
    assert launch_main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("hosts", ["0", "-2", "two"])
def test_a_host_count_must_be_positive_and_says_it_is_the_flag(capsys, hosts):
    with pytest.raises(SystemExit) as exit_:
        launch_main.main(["up", "100mbps", "--hosts", hosts])
    assert exit_.value.code == 2
    assert f"argument --hosts: a number of hosts >= 1, got '{hosts}'" in capsys.readouterr().err


def test_a_timeline_length_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exit_:
        launch_main.main(["probe", "dynamic-halving", "--timeline", "0"])
    assert exit_.value.code == 2
    assert "--timeline: a positive number of seconds, got '0'" in capsys.readouterr().err
