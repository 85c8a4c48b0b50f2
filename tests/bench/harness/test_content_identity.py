"""Identity by content (Note [identity by content], bench.harness.workload): a setting
naming a file or folder enters a cell's identity by what it holds. Another model or data
at the same path is measured again, the reason named; the same files named by another
path are recognised; a folder hashes the same whatever order its files were written in;
large files are hashed once, cached by (path, size, mtime_ns)."""

from __future__ import annotations

import json
import os

import pytest
from harness_helpers import fake_worker_cmd, write_cell

from bench.harness import contents
from bench.harness.contents import CACHE_MIN_BYTES, DIGEST_CACHE, content_digest
from bench.harness.meta import expected_identity
from bench.harness.run import run_sweep
from bench.harness.sweep import CellSpec, SweepSpec, Workload, parse_mode
from bench.launch.choice import LauncherChoice
from bench.launch.netns import NetnsLauncher
from bench.net.scenario import load_scenario
from bench.results.files import read_record, reuse_refusal

NETNS = LauncherChoice("netns", "test", factory=NetnsLauncher)
TEXT = "".join(f"line {i} of the river text, flowing past town {i % 7}.\n" for i in range(400))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """The digest cache of each test in its own folder."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("AQSGD_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def count_hashes(monkeypatch):
    """The files contents.file_sha256 reads, in order."""
    read = []
    real = contents.file_sha256

    def counting(path):
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(contents, "file_sha256", counting)
    return read


def _cell(data_path: str, **workload) -> CellSpec:
    return CellSpec("100mbps", parse_mode("fp32"),
                    Workload(data="text", data_path=data_path, **workload))


# ------------------------------------------------------------------ digests
def test_a_file_is_its_bytes_wherever_it_lies(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "d.txt").write_text(TEXT)
    (tmp_path / "other.txt").write_text(TEXT)
    assert content_digest(tmp_path / "a" / "d.txt") == content_digest(tmp_path / "other.txt")
    (tmp_path / "other.txt").write_text(TEXT + "one more line\n")
    assert content_digest(tmp_path / "a" / "d.txt") != content_digest(tmp_path / "other.txt")
    with pytest.raises(FileNotFoundError, match="missing.txt: neither a file nor a folder"):
        content_digest(tmp_path / "missing.txt")


def test_a_folder_hashes_its_names_and_bytes_in_any_order_written(tmp_path):
    names = ["config.json", "weights.bin", "sub/tokenizer.json"]
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, order in ((first, names), (second, names[::-1])):
        for name in order:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(f"bytes of {name}")
    assert content_digest(first) == content_digest(second)
    (second / "sub" / "tokenizer.json").rename(second / "sub" / "renamed.json")
    assert content_digest(first) != content_digest(second)  # a name is part of it
    (second / "sub" / "renamed.json").rename(second / "sub" / "tokenizer.json")
    (second / "weights.bin").write_text("other weights")
    assert content_digest(first) != content_digest(second)


def test_a_large_file_is_hashed_once_then_again_when_its_size_or_mtime_changes(
        tmp_path, cache_dir, count_hashes):
    big = tmp_path / "model" / "weights.bin"
    big.parent.mkdir()
    big.write_bytes(b"w" * CACHE_MIN_BYTES)
    (tmp_path / "model" / "config.json").write_text("{}")  # small: never cached
    first = content_digest(tmp_path / "model")
    assert count_hashes == ["config.json", "weights.bin"]
    cached = json.loads((cache_dir / DIGEST_CACHE).read_text())
    assert list(cached) == [str(big.resolve())]
    assert cached[str(big.resolve())]["size"] == CACHE_MIN_BYTES

    assert content_digest(tmp_path / "model") == first  # the cache, not the bytes
    assert count_hashes == ["config.json", "weights.bin", "config.json"]

    stat = big.stat()
    os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert content_digest(tmp_path / "model") == first  # same bytes, read again
    assert count_hashes.count("weights.bin") == 2

    big.write_bytes(b"w" * (CACHE_MIN_BYTES + 1))
    assert content_digest(tmp_path / "model") != first
    assert count_hashes.count("weights.bin") == 3


def test_an_unreadable_cache_is_started_again(tmp_path, cache_dir):
    cache_dir.mkdir()
    (cache_dir / DIGEST_CACHE).write_text("{not json")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * CACHE_MIN_BYTES)
    assert content_digest(big) == content_digest(big)
    assert str(big.resolve()) in json.loads((cache_dir / DIGEST_CACHE).read_text())


# ---------------------------------------------------------------- identity
def test_every_path_setting_enters_the_key_by_content_not_as_typed(tmp_path, monkeypatch):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "d.txt").write_text(TEXT if name == "one" else TEXT[::-1])
        (tmp_path / name / "init.pt").write_bytes(name.encode())
    monkeypatch.chdir(tmp_path / "one")
    relative = _cell("./d.txt", init_from="init.pt")
    absolute = _cell(str(tmp_path / "one" / "d.txt"), init_from=str(tmp_path / "one/init.pt"))
    assert relative.key == absolute.key  # the same files, named two ways
    assert relative.workload.paths() == {"data_path": str(tmp_path / "one" / "d.txt"),
                                         "init_from": str(tmp_path / "one" / "init.pt")}
    key = relative.key
    monkeypatch.chdir(tmp_path / "two")  # the same text typed: other files there
    assert relative.key != key
    # a word that is no path, and a value naming no file, stay as typed
    assert Workload(init_from="pretrained").paths() == {}
    assert Workload(data="text", data_path="some/dataset-id").paths() == {}


def test_a_replayed_profile_file_enters_by_content_a_shipped_name_as_typed(tmp_path,
                                                                            monkeypatch):
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "p.yaml").write_text(f"# profile of machine {name}\n")
    monkeypatch.chdir(tmp_path / "one")
    replayed = Workload(compute="replay:p.yaml")
    assert replayed.paths() == {"compute": str(tmp_path / "one" / "p.yaml")}
    key = _cell(None, compute="replay:p.yaml").key
    assert _cell(None, compute=f"replay:{tmp_path / 'one' / 'p.yaml'}").key == key
    monkeypatch.chdir(tmp_path / "two")
    assert _cell(None, compute="replay:p.yaml").key != key
    assert Workload(compute="replay:cpu-2core").paths() == {}  # profiles/, in git_commit
    assert Workload().paths() == {}  # real compute


def test_other_content_at_the_same_path_is_measured_again_the_same_at_another_path_not(
        tmp_path, monkeypatch):
    sweep_dir, scenario = tmp_path / "results", load_scenario("100mbps")
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "d.txt").write_text(TEXT if name == "one" else TEXT.upper())
    monkeypatch.chdir(tmp_path / "one")
    cell_dir = write_cell(sweep_dir, _cell("./d.txt"), rate_mbit=100.0, act_bytes=10,
                          step_time_s=0.1)
    record = read_record(cell_dir)
    assert record.identity.paths == {"data_path": str(tmp_path / "one" / "d.txt")}
    recorded = record.identity.contents["data_path"]

    def refusal(cell: CellSpec) -> str:
        return reuse_refusal(cell_dir, expected_identity(cell, scenario, NETNS, "abc"))

    assert refusal(_cell("./d.txt")) == ""
    monkeypatch.chdir(tmp_path / "two")  # the same text typed, other bytes behind it
    now = content_digest("d.txt")
    assert refusal(_cell("./d.txt")) == (f"data_path content {recorded} recorded, "
                                         f"this run's {now}")
    assert refusal(_cell("../one/d.txt")) == ""  # the recorded bytes, by another path


def test_a_cell_recorded_before_contents_is_measured_again_naming_why(tmp_path, monkeypatch):
    (tmp_path / "d.txt").write_text(TEXT)
    monkeypatch.chdir(tmp_path)
    cell = _cell("d.txt")
    cell_dir = write_cell(tmp_path / "results", cell, rate_mbit=100.0, act_bytes=10,
                          step_time_s=0.1)
    meta = json.loads((cell_dir / "meta.json").read_text())
    for key in ("contents", "paths"):  # as a cell of the path as typed recorded it
        del meta["identity"][key]
    (cell_dir / "meta.json").write_text(json.dumps(meta))
    why = reuse_refusal(cell_dir, expected_identity(cell, load_scenario("100mbps"), NETNS,
                                                    "abc"))
    assert why == (f"data_path content not recorded (a cell of the path as typed), this "
                   f"run's {content_digest('d.txt')}")


def test_cells_naming_no_path_keep_their_identity():
    ident = expected_identity(_cell(None), load_scenario("100mbps"), NETNS, "abc")
    assert "contents" not in ident


# ---------------------------------------------------------------- end to end
@pytest.mark.slow
@pytest.mark.workers
def test_a_sweep_from_two_folders_measures_other_data_again_and_skips_the_same(
        tmp_path, monkeypatch):
    worker, out = fake_worker_cmd(tmp_path), tmp_path / "results"
    for name, text in (("one", TEXT), ("two", TEXT.upper()), ("three", TEXT)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "d.txt").write_text(text)

    def run(folder: str, data_path: str) -> tuple[str, list[str]]:
        monkeypatch.chdir(tmp_path / folder)
        spec = SweepSpec("t", ("100mbps",), (parse_mode("fp32"),),
                         Workload(steps=2, train_samples=64, timeout_s=60, init_from=None,
                                  eval_samples=0, data="text", data_path=data_path))
        lines: list[str] = []
        [outcome] = run_sweep(spec, out, launcher="local", quiet=True, worker_cmd=worker,
                              echo=lines.append)
        return outcome.status, lines

    assert run("one", "./d.txt")[0] == "ok"
    status, lines = run("two", "./d.txt")  # other bytes at the same relative path
    assert status == "ok"
    assert any(line.startswith("measure 100mbps__fp32__local again: data_path content ")
               for line in lines), lines
    status, lines = run("three", str(tmp_path / "two" / "d.txt"))  # two's, absolute
    assert status == "skipped"
    assert any(line.startswith("skip 100mbps__fp32__local (finished earlier") for line in lines)
