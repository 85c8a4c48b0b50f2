"""Activation cache: storage dtypes, memory and mmap storage, capacity errors, bytes/element."""

import math

import pytest
import torch

from aqsgd import quant
from aqsgd.compress.cache import ActivationCache, CacheSpec, check_sample_ids


@pytest.mark.parametrize("storage", ["memory", "mmap"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "quant"])
def test_scatter_gather_round_trip(tmp_path, storage, dtype):
    spec = CacheSpec(num_samples=10, sample_shape=(6, 16), dtype=dtype, bits=8,
                     storage=storage, directory=str(tmp_path) if storage == "mmap" else None)
    rows = torch.randn(3, 6, 16)
    ids = torch.tensor([7, 0, 4])
    with ActivationCache(spec) as cache:
        assert not bool(cache.initialised.any())
        cache.scatter(ids, rows)
        got = cache.gather(torch.tensor([4, 7, 0]))
        want = rows[[2, 0, 1]]
        if dtype == "fp32":
            assert torch.equal(got, want)
        elif dtype == "fp16":
            assert torch.equal(got, want.half().float())
        else:  # 8-bit reference grid, one scale per token: |err| <= scale / 128
            bound = want.abs().amax(-1, keepdim=True) * (1 + 2**-9) / 128
            assert bool(((got - want).abs() <= bound).all())
        assert cache.initialised.tolist() == [i in (0, 4, 7) for i in range(10)]
        assert torch.equal(cache.gather(torch.tensor([1, 9])), torch.zeros(2, 6, 16))


def test_mmap_files_live_in_a_fresh_directory_and_are_removed(tmp_path):
    spec = CacheSpec(num_samples=5, sample_shape=(4, 8), dtype="quant", bits=3,
                     storage="mmap", directory=str(tmp_path))
    cache = ActivationCache(spec)
    made = cache.directory
    assert made.parent == tmp_path and made.is_dir()
    assert sum(f.stat().st_size for f in made.iterdir()) == cache.nbytes()
    cache.close()
    assert not made.exists()
    assert tmp_path.is_dir()  # the caller's directory stays
    cache.close()  # idempotent


def test_quantized_rows_are_self_contained_per_sample():
    # 3 bits x 15 elements is not a whole number of bytes: the per-sample packing path.
    spec = CacheSpec(num_samples=4, sample_shape=(3, 5), dtype="quant", bits=3)
    cache = ActivationCache(spec)
    a, b = torch.randn(1, 3, 5), 100 * torch.randn(1, 3, 5)
    cache.scatter([2], a)
    first = cache.gather([2])
    cache.scatter([1], b)
    cache.scatter([1, 3], torch.cat([b, a]))
    assert torch.equal(cache.gather([2]), first)
    assert torch.equal(cache.gather([3]), first)


@pytest.mark.parametrize("shape", [(128, 128), (1024, 1600), (64, 256)])
def test_four_bit_cache_is_under_0_6_bytes_per_element(shape):
    spec = CacheSpec(num_samples=2, sample_shape=shape, dtype="quant", bits=4)
    per_elem = spec.bytes_per_element()
    assert per_elem <= 0.6
    assert per_elem == (quant.packed_nbytes(math.prod(shape), 4) + 2 * shape[0]) / math.prod(shape)
    assert CacheSpec(num_samples=2, sample_shape=shape).bytes_per_element() == 2.0


def test_ids_out_of_range_name_the_id_and_capacity():
    cache = ActivationCache(CacheSpec(num_samples=6, sample_shape=(2, 2)))
    with pytest.raises(IndexError, match=r"sample id 6 .*capacity 6"):
        cache.gather(torch.tensor([1, 6]))
    with pytest.raises(IndexError, match=r"sample id -1 "):
        cache.scatter([-1], torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="distinct"):
        check_sample_ids([3, 3])
    with pytest.raises(ValueError, match=r"shape \(1, 2, 2\), got \(1, 2, 3\)"):
        cache.scatter([0], torch.zeros(1, 2, 3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_samples": 0}, "num_samples must be >= 1, got 0"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"bits": 9, "dtype": "quant"}, "bits must be an int in 1..8, got 9"),
        ({"storage": "mmap"}, "directory is required"),
        ({"storage": "mmap", "directory": "/nonexistent/aqsgd"}, "existing directory"),
        ({"sample_shape": ()}, "sample_shape must be"),
    ],
)
def test_bad_spec_is_rejected(kwargs, match):
    base = {"num_samples": 4, "sample_shape": (2, 2)}
    with pytest.raises(ValueError, match=match):
        CacheSpec(**{**base, **kwargs})
