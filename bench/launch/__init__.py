"""Launchers: the hosts a run's workers start on. The core here is launcher-neutral:
the Launcher protocol and what every launcher fills the same way (base.py), launcher
choice and the table of where each launcher lives (choice.py), bring-up and signal-safe
teardown (lifecycle.py), state files and cleanup of killed runs (state.py), process
groups (process.py), the link probe (probing.py), links that change during a run (the
schedule runner and the time-resolved probe, schedules.py; competing flows and
stragglers on its clock, competing.py), the command line (__main__.py). One
folder or module per launcher: netns/ (network namespaces), docker/ (containers, and
their compose file), local.py (local processes, unshaped), ssh/ (real hosts from a
hostfile, over SSH); export/ writes what runs a
scenario elsewhere (the multi-host commands). The core imports no launcher (choice.py
finds one by module path when a run asks for it), and no launcher imports another: the
import contracts in pyproject.toml check both.

May import bench.net, bench (REPO_ROOT) and aqsgd.filecache; never bench.harness or
bench.report.
"""
