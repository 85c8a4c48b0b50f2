"""Micro-benchmarks and device checks: quantizer throughput (kernels), compressors, stage
compute against its traffic (stages), the GPU check (gpu_check, with its checks in
triton_checks and ptx_audit); each a `python -m bench.micro.<name>` command. The timing
they share with the performance model's profile is in timing. Imports aqsgd and rich; no
other part of bench.
"""
