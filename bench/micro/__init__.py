"""Micro-benchmarks and device checks: quantizer throughput (kernels), compressors, the GPU
check (gpu_check, with its checks in triton_checks and ptx_audit); each a
`python -m bench.micro.<name>` command. Imports aqsgd and rich; no other part of bench.
"""
