"""Suite-wide test policy.

In CI (env CI=true) a skipped test is a failure: CI machines have root, network
namespaces and the Triton interpreter, so a netns or Triton test that skips there
proves nothing. (No test needs a GPU; `make gpu-check` is the GPU check.)
"""

import os

import pytest
import torch

# Triton decides once, when it is first imported, whether kernels are compiled
# or interpreted; transformers and torch import it early, so the choice has to
# be made here, before any test module is collected. Without a CUDA device the
# only way to run the kernels is the interpreter.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (_in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    report.outcome = "failed"
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
    report.longrepr = f"skipped in CI, where every capability must be present: {reason}"
