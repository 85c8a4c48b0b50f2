"""Entrypoint of the worker image: shaping first, then the command as the worker user.

    AQ_SHAPING_ARGVS='[["tc","qdisc","add","dev","eth0","root","handle","1:","htb"], ...]'
    AQ_SHAPED_FILE=/run/aqsgd/shaped     # present = this container's links are shaped
    AQ_SHAPING_TIMEOUT_S=300             # how long to wait for it
    AQ_SHAPING=none                      # an unshaped container: do not wait
    AQ_WORKER_USER=worker                # who runs the command (root is refused)
    AQ_DELAYLINE_CONFIG='{"host": 0, "tun": "aqtun0", ...}'   # start the delay line first

    aqsgd-entrypoint --tied CMD ARG...   # what `docker exec -i` runs (the launcher)

`--tied` runs CMD in its own process group and stops that group (SIGTERM, then
SIGKILL) as soon as its own stdin reaches end of file: the Docker launcher keeps
the `docker exec -i` client's stdin open, so when the harness stops the client
(or dies), the worker inside the container stops too. `docker exec` alone does
not pass signals on to what it runs.

Two ways a container gets shaped: the Docker launcher runs the tc commands with
`docker exec` and then creates AQ_SHAPED_FILE; a compose file passes them as
AQ_SHAPING_ARGVS (a JSON list of argv lists, run here without a shell) and this
script creates the file itself. Either way the command starts only once the file
exists, so no worker byte ever leaves on an unshaped link.

With AQ_DELAYLINE_CONFIG (a bench.net.delayline TunnelConfig as JSON, for delay,
jitter or loss on a kernel without netem), this script first starts the
container's delay line as root (it needs NET_ADMIN and the TUN device) and waits
until it has written its ready file (DELAYLINE_READY): the delay line creates
the TUN that the shaping commands then address and shape. The checkout must be on
PYTHONPATH (the delay line is bench.net.delayline). It keeps running, as root,
beside the command.
"""

import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.1
TIED_GRACE_S = 5.0
DELAYLINE_DIR = Path("/run/aqsgd")  # bench/launch/docker/spec.py reads the same files
DELAYLINE_READY = DELAYLINE_DIR / "delayline.ready"
DELAYLINE_TIMEOUT_S = 60.0


def start_delay_line(config_json: str) -> None:
    """Start the delay line in the background and wait until it forwards packets."""
    DELAYLINE_DIR.mkdir(parents=True, exist_ok=True)
    config = DELAYLINE_DIR / "delayline.json"
    config.write_text(config_json)
    log_path = DELAYLINE_DIR / "delayline.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            # -P: not the working folder first on sys.path (bench/launch/process.py)
            [sys.executable, "-P", "-m", "bench.net.delayline", "--tunnel-config", str(config),
             "--ready-file", str(DELAYLINE_READY)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    (DELAYLINE_DIR / "delayline.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + DELAYLINE_TIMEOUT_S
    while not DELAYLINE_READY.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = (f"exited with {proc.returncode}" if proc.returncode is not None
                   else f"not ready after {DELAYLINE_TIMEOUT_S:.0f} s")
            sys.exit(f"the delay line {why}; its log ({log_path}):\n{log_path.read_text()}")
        time.sleep(POLL_S)


def apply_shaping(argvs_json: str) -> None:
    argvs = json.loads(argvs_json)
    if not (isinstance(argvs, list) and all(isinstance(a, list) and a for a in argvs)):
        sys.exit(f"AQ_SHAPING_ARGVS: expected a JSON list of non-empty argv lists, "
                 f"got {argvs_json[:200]!r}")
    for argv in argvs:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"shaping command {' '.join(map(str, argv))!r} failed "
                     f"(exit {done.returncode}): {done.stderr.strip()}")


def wait_for(flag: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not flag.exists():
        if time.monotonic() > deadline:
            sys.exit(f"shaping not in place after {timeout_s:.0f} s ({flag} missing): "
                     f"refusing to start the worker on an unshaped link")
        time.sleep(POLL_S)


def drop_to(user: str) -> None:
    entry = pwd.getpwnam(user)
    if entry.pw_uid == 0:
        sys.exit(f"AQ_WORKER_USER: expected a non-root user, got {user!r}")
    if os.geteuid() == 0:
        os.initgroups(entry.pw_name, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    os.environ.update(HOME=entry.pw_dir, USER=entry.pw_name)


def run_tied(argv: list[str]) -> int:
    """Run argv until it exits, or until stdin closes (then stop its group)."""
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)

    def watch_stdin() -> None:
        while os.read(0, 65536):  # the raw descriptor: no buffer lock held at exit
            pass
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(TIED_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)

    threading.Thread(target=watch_stdin, daemon=True).start()
    code = child.wait()
    return code if code >= 0 else 128 - code  # a signal -N as the shell reports it


def exit_now(code: int) -> None:
    """Exit without interpreter shutdown, which would wait on the stdin watcher."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: aqsgd-entrypoint [--tied] COMMAND [ARG...]")
    if argv[0] == "--tied":
        exit_now(run_tied(argv[1:]))
    flag = Path(os.environ.get("AQ_SHAPED_FILE", "/run/aqsgd/shaped"))
    if "AQ_DELAYLINE_CONFIG" in os.environ:
        start_delay_line(os.environ["AQ_DELAYLINE_CONFIG"])
    if os.environ.get("AQ_SHAPING") != "none":
        if "AQ_SHAPING_ARGVS" in os.environ:
            apply_shaping(os.environ["AQ_SHAPING_ARGVS"])
            flag.parent.mkdir(parents=True, exist_ok=True)
            flag.touch()
        wait_for(flag, float(os.environ.get("AQ_SHAPING_TIMEOUT_S", "300")))
    drop_to(os.environ.get("AQ_WORKER_USER", "worker"))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
