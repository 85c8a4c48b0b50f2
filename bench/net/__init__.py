"""Network emulation as data and tools: scenarios, tc/ip command builders, the command
executor, the userspace delay line and the link probe (with its ProbeRecord). Imports
nothing of aqsgd and no launcher.
"""
