"""The results directory's lock (bench.harness.lock), held by real processes: a second
sweep is refused naming the holder, a dead holder's lock is taken over and said so."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from bench import REPO_ROOT
from bench.harness.lock import LOCK_NAME, SweepLocked, sweep_lock

pytestmark = pytest.mark.timeout(60)

# holds the lock of argv[1] until its stdin closes; says "held" once it has it
HOLDER = ("import sys; from pathlib import Path; from bench.harness.lock import sweep_lock\n"
          "with sweep_lock(Path(sys.argv[1]), echo=print):\n"
          "    print('held', flush=True); sys.stdin.read()\n")


def _holder(sweep_dir) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(sweep_dir)], cwd=REPO_ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_sweep_into_a_held_directory_is_refused_naming_the_holder(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(SweepLocked, match=rf"{tmp_path}: another sweep is writing it: "
                                              rf"pid {holder.pid} \(.*-c .*\), since 20"):
            with sweep_lock(tmp_path, echo=print):
                pass
        # the command line too: `python -m bench sweep` into it exits 2 with one line
        sweep = tmp_path / "s.yaml"
        sweep.write_text("name: s\nscenarios: [loopback]\nmodes: [fp32]\nworkload: {steps: 1}\n")
        done = subprocess.run([sys.executable, "-m", "bench", "sweep", str(sweep),
                               "--launcher", "local", "--out", str(tmp_path), "--quiet"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"another sweep is writing it: pid {holder.pid}" in done.stderr
        assert "Traceback" not in done.stderr and not (tmp_path / "sweep.json").exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    # released on purpose: taken without a word
    said = []
    with sweep_lock(tmp_path, echo=said.append):
        record = json.loads((tmp_path / LOCK_NAME).read_text())
    assert said == [] and record["command"]
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_the_lock_of_a_killed_sweep_is_taken_over_and_said_so(tmp_path):
    holder = _holder(tmp_path)
    holder.kill()  # SIGKILL: its record stays, the kernel drops its flock
    holder.wait(timeout=10)
    said = []
    t0 = time.monotonic()
    with sweep_lock(tmp_path, echo=said.append):
        pass
    assert time.monotonic() - t0 < 5
    assert len(said) == 1 and said[0].startswith(
        f"{tmp_path}: took over the lock left by pid {holder.pid} (")
    assert "no process holds it any more" in said[0]


def test_a_full_file_system_under_the_lock_stops_the_sweep_naming_the_folder(tmp_path):
    import errno

    from bench.harness.lock import ResultsFolderFull, raise_if_full

    with pytest.raises(ResultsFolderFull, match=rf"^{tmp_path}: no space left on its file "
                                                r"system \(\[Errno 28\] .*\); the sweep "
                                                r"stopped.*run the same command again"):
        with sweep_lock(tmp_path, echo=print):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (tmp_path / LOCK_NAME).read_text() == ""  # released: nothing to take over
    with pytest.raises(PermissionError):  # any other OSError passes as it was
        with sweep_lock(tmp_path, echo=print):
            raise PermissionError(errno.EACCES, "denied")
    with pytest.raises(OSError) as caught:  # re-raised where a cell would record it
        raise_if_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert caught.value.errno == errno.EDQUOT
    raise_if_full(OSError(errno.EIO, "I/O error"))  # not a full disk: the caller records it
    raise_if_full(ValueError("no"))
