"""The worker's `--local` mode does not read the caller's folder (Note [safe path] of
bench.launch.process): a job started from a folder whose `json.py` and `torch.py` raise
on import runs, torchrun and its ranks started with -P and PYTHONSAFEPATH."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from aqsgd.train import worker

CONFIG = {
    "model": {"preset": "tiny", "n_embd": 32, "vocab_size": 64, "seq_len": 8},
    "pipeline": {"stages": 2, "micro_batch_size": 2, "num_micro_batches": 2},
    "train": {"total_steps": 2, "init_from": None, "eval_batches": 0},
    "data": {"name": "synthetic", "max_samples": 8, "eval_samples": 0},
}


def _shadowing_folder(tmp_path):
    caller = tmp_path / "caller"
    caller.mkdir()
    for name in ("json", "torch"):
        (caller / f"{name}.py").write_text(
            f"raise ImportError('{name}.py of the caller folder was imported')\n")
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "output": {"dir": str(tmp_path / "out")}}))
    return caller, path


def test_torchrun_and_its_ranks_start_isolated(tmp_path, monkeypatch):
    seen = {}

    def run(argv, env, check):
        seen.update(argv=argv, env=env)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(worker.subprocess, "run", run)
    _, path = _shadowing_folder(tmp_path)
    assert worker.run_local(path, 2) == 0
    assert seen["argv"][1:4] == ["-P", "-m", "torch.distributed.run"]
    assert seen["env"]["PYTHONSAFEPATH"] == "1"  # the ranks torchrun starts inherit it


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(180)
def test_a_local_job_from_a_folder_that_shadows_json_and_torch_runs(tmp_path, monkeypatch,
                                                                    capfd):
    caller, path = _shadowing_folder(tmp_path)
    monkeypatch.chdir(caller)
    assert worker.main(["--config", str(path), "--local", "2"]) == 0, capfd.readouterr().err
    assert "of the caller folder was imported" not in capfd.readouterr().err
    assert (tmp_path / "out" / "metrics" / "rank1.jsonl").is_file()
