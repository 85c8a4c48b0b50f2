"""Run config loading and validation, and failure handling across real processes."""

import json
import time
from pathlib import Path

import pytest
import yaml
from harness_helpers import run_ranks

from aqsgd.train.config import ConfigError, RunConfig, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[3]


def test_example_config_loads_and_round_trips():
    cfg = load_config(REPO / "examples" / "tiny-2stage.yaml")
    assert isinstance(cfg, RunConfig) and cfg.pipeline.stages == 2
    assert config_from_dict(cfg.to_dict()) == cfg
    json.dumps(cfg.to_dict())  # provenance must serialise


def test_preset_with_overrides():
    cfg = config_from_dict({"model": {"preset": "tiny", "dropout": 0.0, "n_layer": 4}})
    assert cfg.model.dropout == 0.0 and cfg.model.n_layer == 4 and cfg.model.n_embd == 128


@pytest.mark.parametrize(
    "data,message",
    [
        ({"train": {"lr": 1e-3, "lrr": 2}}, r"unknown key train\.lrr \(known keys: .*lr,"),
        ({"bogus": {}}, r"unknown key bogus"),
        ({"train": {"lr": "fast"}}, r"train\.lr: expected a number, got 'fast'"),
        ({"train": {"total_steps": 2.5}}, r"train\.total_steps: expected an integer, got 2\.5"),
        ({"train": {"total_steps": True}}, r"train\.total_steps: expected an integer, got True"),
        ({"output": {"trace": "yes"}}, r"output\.trace: expected true/false, got 'yes'"),
        ({"train": {"total_steps": 0}}, r"train: total_steps must be >= 1, got 0"),
        ({"dist": {"backend": "mpi"}}, r"dist\.backend: expected one of auto\|gloo\|nccl"),
        ({"pipeline": {"schedule": "zb"}},
         r"pipeline\.schedule: expected one of gpipe\|1f1b, got 'zb'"),
        ({"model": {"preset": "huge"}}, r"model\.preset: expected one of .*'huge'"),
        ({"model": {"preset": "tiny", "n_head": 3}}, r"model: .*n_embd \(128\).*n_head \(3\)"),
        ({"forward": {"mode": "zip"}}, r"forward: .*mode must be one of .*'zip'"),
        ({"backward": {"mode": "aqsgd"}}, r"backward\.mode must be none or directq"),
        ({"grad": {"mode": "sum"}}, r"grad: .*mode must be one of .*'sum'"),
        ({"data": {"name": "imagenet"}}, r"data\.name: expected one of pydoc\|.*got 'imagenet'"),
        ({"pipeline": {"stages": 3}, "model": {"preset": "tiny"}}, r"exceeds model\.n_layer=2"),
        ({"train": []}, r"train: expected a mapping, got \[\]"),
        ({"train": {"seed": -1}}, r"train: seed must be >= 0, got -1"),
        ({"data": {"eval_samples": 2}}, r"data\.eval_samples=2 is fewer than one micro-batch"),
    ],
)
def test_bad_configs_name_key_and_value(data, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_load_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(bad)
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"train": {"stepz": 1}}))
    with pytest.raises(ConfigError, match=r"run\.json: unknown key train\.stepz"):
        load_config(js)
    with pytest.raises(ConfigError, match="cannot read run config"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(240)
def test_failing_rank_makes_every_rank_exit_nonzero(tmp_path):
    """Rank 1 (stage 1 of replica 0) raises in step 1; its pipeline peer and the
    other replica (reached only through the data-parallel groups) must all fail
    by themselves, with status 1, well within the timeout."""
    timeout_s = 30
    cfg = {
        "model": {"preset": "tiny", "n_embd": 32, "vocab_size": 64, "seq_len": 8},
        "pipeline": {"stages": 2, "replicas": 2, "micro_batch_size": 2, "num_micro_batches": 2},
        "train": {"total_steps": 50, "init_from": None, "fail_at_step": 1, "fail_rank": 1,
                  "eval_batches": 0},
        "data": {"name": "synthetic", "max_samples": 32},
        "dist": {"timeout_s": timeout_s},
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # stopped ranks would show as -15 or -9
    codes = run_ranks(path, 4, tmp_path / "logs", grace_s=timeout_s + 60)
    finished = time.monotonic()
    logs = {r: (tmp_path / "logs" / f"rank{r}.log").read_text() for r in range(4)}
    assert codes == [1, 1, 1, 1], (codes, logs)
    assert "aqsgd.train.worker: rank 1 (stage 1, replica 0) failed: InjectedFailure: " in logs[1]
    for r in (0, 2, 3):
        assert f"aqsgd.train.worker: rank {r} (stage {r % 2}, replica {r // 2}) failed:" in logs[r]
        assert "Traceback" in logs[r]
    # Step 0 completed everywhere before the failure: metrics were flushed.
    first = (tmp_path / "out" / "metrics" / "rank3.jsonl").read_text().splitlines()[0]
    assert json.loads(first)["step"] == 0
    # The failure was noticed within the timeout (the rank files' last write is
    # step 0; every process had ended by `finished`).
    mtime = (tmp_path / "out" / "metrics" / "rank1.jsonl").stat().st_mtime
    assert finished - mtime < timeout_s, finished - mtime


def test_rendezvous_from_torchrun_environment(monkeypatch):
    from aqsgd.train.worker import _parse

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "198.18.0.1")
    monkeypatch.setenv("MASTER_PORT", "29555")
    args = _parse(["--config", "run.yaml", "--rank", "1"])  # flags win over the environment
    assert (args.rank, args.world_size, args.master_addr, args.master_port) == (
        1, 4, "198.18.0.1", 29555)  # fmt: skip
    monkeypatch.delenv("MASTER_PORT")
    with pytest.raises(SystemExit):
        _parse(["--config", "run.yaml"])


@pytest.mark.workers
@pytest.mark.timeout(180)
def test_local_command_runs_a_job_and_prints_its_summary(tmp_path, capsys):
    """`python -m aqsgd.train.worker --config F --local 2`: the one-command loopback fine-tune."""
    from aqsgd.train.worker import main

    cfg = {
        "model": {"preset": "tiny", "n_embd": 32, "vocab_size": 64, "seq_len": 8},
        "pipeline": {"stages": 2, "micro_batch_size": 2, "num_micro_batches": 2},
        "forward": {"mode": "aqsgd", "bits": 2, "warmup_epochs": 1},
        "train": {"total_steps": 6, "init_from": None, "eval_every": 6, "eval_batches": 1},
        "data": {"name": "synthetic", "max_samples": 8, "eval_samples": 4},
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["--config", str(path), "--local", "2"]) == 0
    out = capsys.readouterr().out
    records = [json.loads(line) for line in
               (tmp_path / "out" / "metrics" / "rank1.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert len(train) == 6
    assert f"6 steps: train loss {train[0]['loss']:.4f} -> {train[-1]['loss']:.4f}" in out
    # after the warm-up epoch (2 steps of 2x2 samples), 2-bit deltas: far fewer bytes
    assert train[-1]["bytes_recv"]["activation"] < train[0]["bytes_recv"]["activation"] / 4
    assert f"activation bytes received in the last step {train[-1]['bytes_recv']['activation']}" \
        in out
    assert "eval loss" in out and str(tmp_path / "out" / "metrics") in out


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(180)
def test_local_command_fails_when_a_rank_fails(tmp_path, capsys):
    """`--local 2` under torchrun: rank 1 raises in step 1; the command exits non-zero
    well within the timeout, every rank stopped, and prints no summary."""
    timeout_s = 30
    cfg = {
        "model": {"preset": "tiny", "n_embd": 32, "vocab_size": 64, "seq_len": 8},
        "pipeline": {"stages": 2, "micro_batch_size": 2, "num_micro_batches": 2},
        "train": {"total_steps": 50, "init_from": None, "fail_at_step": 1, "fail_rank": 1,
                  "eval_batches": 0},
        "data": {"name": "synthetic", "max_samples": 8},
        "dist": {"timeout_s": timeout_s},
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    from aqsgd.train.worker import main

    started = time.monotonic()
    assert main(["--config", str(path), "--local", "2"]) != 0
    assert time.monotonic() - started < timeout_s + 30
    assert "steps: train loss" not in capsys.readouterr().out
    records = (tmp_path / "out" / "metrics" / "rank0.jsonl").read_text().splitlines()
    assert len(records) < 50  # stopped, not run to the end
