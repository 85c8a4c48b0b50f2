"""Stragglers as data: their bounds and the CPU quota a factor gives."""

import pytest

from bench.net.straggler import MIN_QUOTA_US, PERIOD_US, Straggler, cpu_quota_us
from specfile import SpecError


def test_a_straggler_checks_its_factor_and_interval():
    s = Straggler(1, 2, 10, 30)
    assert (s.factor, s.end_s) == (2.0, 40.0)
    for args, field in (((1, 1, 0, 1), "factor"), ((1, 101, 0, 1), "factor"),
                        ((-1, 2, 0, 1), "host"), ((1, 2, -1, 1), "start_s"),
                        ((1, 2, 0, 0), "duration_s")):
        with pytest.raises(SpecError) as info:
            Straggler(*args)
        assert info.value.field == field


def test_the_quota_is_the_hosts_cores_over_the_factor():
    assert cpu_quota_us(2, cores_available=1) == PERIOD_US // 2
    assert cpu_quota_us(4, cores_available=2) == PERIOD_US // 2
    assert cpu_quota_us(3, cores_available=0.5) == round(PERIOD_US / 6)
    assert cpu_quota_us(100, cores_available=0.5) == MIN_QUOTA_US  # the kernel's floor
    with pytest.raises(ValueError, match="factor > 1"):
        cpu_quota_us(1, cores_available=1)
