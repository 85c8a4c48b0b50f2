"""specfile's YAML rules (Note [plain YAML] in specfile/plainyaml.py): anchors, aliases and
merge keys refused, a key written twice refused naming both lines, nesting and file size
bounded; for every file kind the suite reads, through that kind's own loader and error."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from aqsgd.train.config import ConfigError, load_config
from aqsgd.train.config import main as config_main
from bench.__main__ import main as bench_main
from bench.harness.sweep import load_sweep
from bench.net.scenario import ScenarioError, load_scenario
from bench.perfmodel.profile import ProfileError, load_profile
from specfile import MAX_FILE_BYTES, SpecError, read_file
from specfile.plainyaml import MAX_DEPTH

REPO = Path(__file__).resolve().parents[2]

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded.
LAUGHS = 'lol0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"lol{k}: &l{k} [{','.join([f'*l{k - 1}'] * 9)}]\n" for k in range(1, 9))


def _write(tmp_path: Path, text: str, name: str = "f.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _refused(tmp_path: Path, text: str, name: str = "f.yaml") -> str:
    with pytest.raises(SpecError) as info:
        read_file(_write(tmp_path, text, name))
    message = str(info.value)
    assert message.startswith(str(tmp_path / name) + ": "), message
    return message


# ------------------------------------------------------------------ each rule


def test_an_anchor_is_refused_naming_the_field_and_line(tmp_path):
    message = _refused(tmp_path, "name: x\nlink: &base {rate_mbit: 100}\n")
    assert "field 'link' (line 2): YAML anchor '&base' refused" in message
    assert "write the value out" in message


def test_an_alias_is_refused_naming_the_field_and_line(tmp_path):
    message = _refused(tmp_path, "links:\n  - {src: 0}\n  - *base\n")
    assert "field 'links[1]' (line 3): YAML alias '*base' refused" in message


def test_a_merge_key_is_refused(tmp_path):
    message = _refused(tmp_path, "workload:\n  steps: 3\n  <<: {lr: 0.1}\n")
    assert "field 'workload.<<' (line 3): YAML merge key '<<' refused" in message
    # a quoted '<<' is an ordinary key (and the validation refuses it as unknown)
    assert read_file(_write(tmp_path, "'<<': 1\n")) == {"<<": 1}


def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path):
    message = _refused(tmp_path, "name: x\nworkload:\n  steps: 3\n  lr: 0.1\n  steps: 300\n")
    assert "field 'workload.steps': key 'steps' appears twice, at lines 3 and 5" in message
    assert "keep one" in message
    message = _refused(tmp_path, "workload: {steps: 3, steps: 300}\n")
    assert "field 'workload.steps': key 'steps' appears twice, on line 1" in message
    message = _refused(tmp_path, "links:\n  - {src: 0, dst: 1}\n  - {src: 1,\n     src: 2}\n")
    assert "field 'links[1].src': key 'src' appears twice, at lines 3 and 4" in message


def test_keys_are_the_same_when_they_build_the_same_value(tmp_path):
    message = _refused(tmp_path, "seeds:\n  1: a\n  0x1: b\n")
    assert "key '1' (written '0x1' the second time) appears twice, at lines 2 and 3" in message
    # the same key in two different mappings is no repeat
    assert read_file(_write(tmp_path, "a: {x: 1}\nb: {x: 2}\n")) == {"a": {"x": 1}, "b": {"x": 2}}


def test_nesting_is_bounded(tmp_path):
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    assert f"nested more than {MAX_DEPTH} levels deep" in _refused(tmp_path, deep)
    fine = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert read_file(_write(tmp_path, fine)) is not None
    # far deeper than Python's stack: the same message, not a RecursionError
    assert "levels deep" in _refused(tmp_path, "[" * 5000)


def test_file_size_is_bounded(tmp_path):
    at_limit = "# " + "x" * (MAX_FILE_BYTES - 7) + "\na: 1"  # a long comment, then a key
    assert len(at_limit) == MAX_FILE_BYTES
    assert read_file(_write(tmp_path, at_limit)) == {"a": 1}
    message = _refused(tmp_path, at_limit + "\n")
    assert f"larger than {MAX_FILE_BYTES // 1024} KiB, the limit for a file" in message


def test_json_files_follow_the_rules_that_apply_to_them(tmp_path):
    message = _refused(tmp_path, '{"train": {"steps": 3, "lr": 0.1, "steps": 300}}', "c.json")
    assert "key 'steps' appears twice in the object with keys ['lr', 'steps']" in message
    assert "nested too deep" in _refused(tmp_path, "[" * 100_000, "c.json")
    assert read_file(_write(tmp_path, '{"a": {"x": 1}, "b": {"x": 2}}', "c.json"))["b"] == {"x": 2}


def test_the_billion_laughs_file_is_refused_at_once(tmp_path):
    started = time.perf_counter()
    message = _refused(tmp_path, LAUGHS)
    assert time.perf_counter() - started < 0.25
    assert "field 'lol0' (line 1): YAML anchor '&l0' refused" in message


def test_every_shipped_file_is_plain_yaml():
    files = [*REPO.glob("scenarios/*.yaml"), *REPO.glob("scenarios/sweeps/*.yaml"),
             *REPO.glob("profiles/*.yaml"), *REPO.glob("examples/*.yaml")]
    assert len(files) >= 20
    for path in files:
        assert isinstance(read_file(path), dict), path


# ------------------------------------------------------------ each file kind

# A small valid file of each kind, ending in a block section (SECTION, KEY, VALUE) that the
# cases below change; its loader; the error class it raises; `what` in its messages.
KINDS = {
    "scenario": ("description: d\nlayout:\n  stages: 2\nlink:\n  rate_mbit: 100\n",
                 ("link", "rate_mbit", "10"), load_scenario, ScenarioError, "scenario file"),
    "sweep": ("name: s\nscenarios: [loopback]\nmodes: [fp32]\nworkload:\n  steps: 3\n",
              ("workload", "steps", "300"), load_sweep, SpecError, "sweep file"),
    "run config": ("pipeline:\n  stages: 2\ntrain:\n  total_steps: 3\n",
                   ("train", "total_steps", "300"), load_config, ConfigError, "run config"),
    "profile": ("name: p\ndevice: cpu\nsource: test\ndate: '2026-01-01'\nkind: published\n"
                "compute:\n  flop_rate_tflops: 1.0\n",
                ("compute", "flop_rate_tflops", "2.0"), load_profile, ProfileError, "profile"),
}


def _case(case: str, text: str, section: str, key: str, value: str) -> tuple[str, str]:
    """The file `text` changed by `case`, and what its message must contain."""
    n = text.count("\n")
    if case == "duplicate":
        return (text + f"  {key}: {value}\n",
                f"field '{section}.{key}': key '{key}' appears twice, at lines {n} and {n + 1}")
    if case == "anchor":
        return (text.replace(f"\n{section}:\n", f"\n{section}: &s\n"),
                f"field '{section}' (line {n - 1}): YAML anchor '&s' refused")
    if case == "alias":
        return (text + "  again: *s\n", f"field '{section}.again' (line {n + 1}): YAML alias")
    if case == "merge":
        return (text + f"  <<: {{{key}: {value}}}\n",
                f"field '{section}.<<' (line {n + 1}): YAML merge key '<<' refused")
    if case == "laughs":
        return LAUGHS + text, "field 'lol0' (line 1): YAML anchor '&l0' refused"
    assert case == "size", case
    return (text + "#" * MAX_FILE_BYTES + "\n",
            f"larger than {MAX_FILE_BYTES // 1024} KiB, the limit for a ")


@pytest.mark.parametrize("kind", KINDS)
def test_the_small_file_of_each_kind_loads(tmp_path, kind):
    text, _, load, _, _ = KINDS[kind]
    load(_write(tmp_path, text))


@pytest.mark.parametrize("case", ["duplicate", "anchor", "alias", "merge", "laughs", "size"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_refuses_each_case_with_its_own_error(tmp_path, kind, case):
    text, (section, key, value), load, error, what = KINDS[kind]
    bad, expected = _case(case, text, section, key, value)
    path = _write(tmp_path, bad)
    started = time.perf_counter()
    with pytest.raises(error) as info:
        load(path)
    assert time.perf_counter() - started < 0.5
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    if case == "size":
        assert message.endswith(f"the limit for a {what} (they are a few KiB); "
                                "is this the right file?"), message


# ------------------------------------------------- the commands that read them


@pytest.mark.parametrize("kind, argv", [
    ("scenario", ["run", "--scenario", "{path}", "--out", "{out}"]),
    ("sweep", ["sweep", "{path}", "--out", "{out}"]),
    ("profile", ["model", "--profile", "{path}", "--scenario", "100mbps"]),
])
def test_bench_commands_answer_a_refused_file_with_exit_2(tmp_path, capsys, kind, argv):
    text, (section, key, value), *_ = KINDS[kind]
    path = _write(tmp_path, _case("duplicate", text, section, key, value)[0])
    argv = [a.format(path=path, out=tmp_path / "out") for a in argv]
    assert bench_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: field '{section}.{key}': key '{key}' appears twice")
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def _config_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aqsgd.train.config", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("content, expected", [
    ("train:\n  steps: 3\n  steps: 300\n",
     "field 'train.steps': key 'steps' appears twice, at lines 2 and 3"),
    ("train: &t {steps: 3}\n", "field 'train' (line 1): YAML anchor '&t' refused"),
    ("train: {lr: fast}\n", "train.lr: expected a number, got 'fast'"),
    ("train: {stepz: 3}\n", "unknown key train.stepz (known keys: clip,"),
    ("pipeline: {stages: 9}\n", "pipeline.stages=9 exceeds model.n_layer=2"),
    ("train: [1,\n", "not valid YAML: while parsing a flow node; expected"),
    (None, "cannot read run config"),
])
def test_config_main_answers_a_bad_file_in_one_line(tmp_path, capsys, content, expected):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    assert config_main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("python -m aqsgd.train.config: ")
    assert expected in err and str(path) in err


def test_config_module_answers_a_bad_file_without_a_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  steps: 3\n  steps: 300\n")
    done = _config_cli(str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"python -m aqsgd.train.config: {path}: field 'train.steps': key "
                           "'steps' appears twice, at lines 2 and 3 (the second would replace "
                           "the first); keep one\n")


def test_config_module_without_a_file_says_what_to_give():
    done = _config_cli()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "usage: python -m aqsgd.train.config FILE   (a run config, e.g. "
        "examples/tiny-2stage.yaml)",
        "python -m aqsgd.train.config: error: the following arguments are required: FILE"]


def test_config_main_prints_a_good_file_resolved(capsys):
    assert config_main(["examples/tiny-2stage.yaml"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model:\n") and "  total_steps: 24\n" in out
    assert yaml.safe_load(out) == load_config(REPO / "examples/tiny-2stage.yaml").to_dict()
