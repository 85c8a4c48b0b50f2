"""Atomic writes (aqsgd.filecache)."""

from __future__ import annotations

import os

import pytest

from aqsgd import filecache
from aqsgd.filecache import atomic_write_text

pytestmark = pytest.mark.timeout(30)


def test_atomic_write_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "meta.json"
    atomic_write_text(path, "first")
    atomic_write_text(path, "second")
    assert path.read_text() == "second"
    assert [p.name for p in path.parent.iterdir()] == ["meta.json"]


def test_atomic_write_failure_keeps_old_file_and_removes_temporary(tmp_path, monkeypatch):
    path = tmp_path / "metrics.csv"
    atomic_write_text(path, "old,complete\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(filecache.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new,half")
    assert path.read_text() == "old,complete\n"
    assert sorted(os.listdir(tmp_path)) == ["metrics.csv"]
