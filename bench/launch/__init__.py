"""Launchers: the hosts a run's workers start on.

    choice = bench.launch.choice.choose_launcher("auto")   # which one, and why
    with choice.factory(scenario, n_hosts, run_id=rid, state_dir=d) as hosts: ...

The core is launcher-neutral: the Launcher protocol (base.py), the launchers' common body
on one transport each (hosts.py), choice (choice.py), bring-up and teardown
(lifecycle.py), state files and cleanup (state.py), process groups (process.py), the
watchdog ending a run whose harness died (watchdog.py), the link probe (probing.py),
links that change during a run (schedules.py, competing.py), the hostfile of real
machines (hostfile.py: the SSH launcher's and the multi-host export's), the command line
(__main__.py). One folder or module per launcher (netns/, docker/, local.py,
ssh/, each named in choice.FACTORIES); export/ writes what runs a scenario elsewhere. The
core imports no launcher and no launcher imports another (pyproject.toml's contracts).
May import bench.net, bench (REPO_ROOT) and aqsgd.filecache; never bench.harness or
bench.report.
"""
