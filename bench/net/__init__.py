"""Network emulation as data and tools: scenarios, tc/ip command builders, the command
executor, the userspace delay line, the link probe (with its ProbeRecord) and link
schedules (schedule.py: phases and trace files), competing flows and the training's share
of a link (competing.py), stragglers and their CPU quota (straggler.py). Imports nothing
of aqsgd and no launcher.
"""
