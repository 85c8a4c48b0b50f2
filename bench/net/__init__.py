"""Network emulation as data and tools: scenarios, tc/ip command builders, the command
executor, the userspace delay line, the link probe (with its ProbeRecord) and link
schedules (schedule.py: phases and trace files). Imports
nothing of aqsgd and no launcher.
"""
