"""Suite-wide test policy: what a test needs of the host, and skips under CI.

Capabilities. A test that needs network namespaces is marked `netns`, one that needs a
Docker daemon and the worker image `docker_daemon`; either mark makes its setup use the
fixture of that name below (`netns_usable`, `docker_usable`), which asks the launcher
choice's own check (bench.launch.choice) and skips with its reason. A test may use the
fixture instead of the mark: it gets the mark here, so `-m` selects by what a test
needs (`make test-fast`: no root, no Docker, no worker processes).

In CI (env CI=true) a skipped test is a failure, and so is a test module skipped while
it is collected (`pytest.skip(..., allow_module_level=True)`, `pytest.importorskip`):
CI machines have root, network namespaces, the suite's Docker daemon and the Triton
interpreter, so a test that skips there proves nothing. (No test needs a GPU;
`make gpu-check` is the GPU check.)
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

# mark -> the fixture whose setup skips a test where the host lacks what it needs
CAPABILITY_FIXTURES = {"netns": "netns_usable", "docker_daemon": "docker_usable"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def netns_usable() -> None:
    """Skips unless network namespaces work here (root and `ip netns`)."""
    from bench.launch import choice

    ok, why = choice.netns_usable()
    if not ok:
        pytest.skip(f"network namespaces unusable: {why}")


@pytest.fixture(scope="session")
def docker_usable() -> None:
    """Skips unless a Docker daemon answers and the worker image is present."""
    from bench.launch import choice

    ok, why = choice.docker_usable()
    if not ok:
        pytest.skip(f"Docker unusable: {why}")


@pytest.fixture(autouse=True)
def _capabilities(request) -> None:
    for mark, fixture in CAPABILITY_FIXTURES.items():
        if request.node.get_closest_marker(mark) is not None:
            request.getfixturevalue(fixture)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        for mark, fixture in CAPABILITY_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(mark)


def _fail_in_ci(report) -> None:
    """A skipped report becomes a failure under CI, saying why it skipped."""
    if not (_in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    report.outcome = "failed"
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
    report.longrepr = f"skipped in CI, where every capability must be present: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_in_ci(outcome.get_result())
