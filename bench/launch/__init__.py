"""Launchers: one Launcher protocol (base.py) that the netns and local launchers implement,
the shared spawn/supervise/kill code (process.py), launcher choice and the multi-host
planner. May import bench.net and aqsgd.filecache; never bench.harness or bench.report.
"""
