"""Commands run (bench.net.executor): failures name the command and its stderr (only
`ip link show` runs; no root needed)."""

import pytest

from bench.net.executor import CommandError, Executor, RecordingExecutor


def test_executor_fails_loudly_with_command_and_stderr():
    ex = Executor()
    with pytest.raises(CommandError) as info:
        ex.run(("ip", "link", "show", "dev", "aq-no-such-dev"))
    msg = str(info.value)
    assert "ip link show dev aq-no-such-dev" in msg and "stderr:" in msg
    assert info.value.returncode != 0 and info.value.stderr
    with pytest.raises(TypeError, match="argv"):
        ex.run("ip link show")
    with pytest.raises(CommandError, match="executable not found"):
        ex.run(("aq-no-such-binary",))
    rec = RecordingExecutor()
    rec.run_all([("tc", "qdisc", "show")])
    assert rec.history == [("tc", "qdisc", "show")]
