"""Starting checkpoint: built once, cached by config and tokenizer, reused, race-safe."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from aqsgd.data.tokenizer import bpe_tokenizer
from aqsgd.model.config import PRESETS, ModelConfig
from aqsgd.model.gpt2 import build_full_model, init_stage, lm_loss
from aqsgd.model.pretrain import (
    PretrainConfig,
    checkpoint_path,
    main,
    pretrain,
    starting_checkpoint,
    starting_checkpoint_path,
)

SMALL = ModelConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=300, seq_len=16, dropout=0.0)
QUICK = PretrainConfig(steps=6, batch_size=4, warmup_steps=1, eval_batches=1, corpus_chars=100_000)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cache")
    bpe_tokenizer(SMALL.vocab_size, path)  # shared by every test here
    return path


@pytest.mark.timeout(60)
def test_builds_once_then_reuses(cache_dir):
    path, built = starting_checkpoint_path(SMALL, cache_dir, pretrain_cfg=QUICK)
    assert built and path.is_file() and path.parent == cache_dir / "checkpoints"
    assert SMALL.config_hash() in path.name
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["model"] == SMALL.to_dict() and meta["pretrain"]["steps"] == 6
    assert meta["stats"]["tokens_seen"] == 6 * 4 * 16
    mtime = path.stat().st_mtime_ns
    again, built_again = starting_checkpoint_path(SMALL, cache_dir, pretrain_cfg=QUICK)
    assert (again, built_again) == (path, False) and path.stat().st_mtime_ns == mtime
    # Threads are not part of the key; the schedule is.
    threaded = PretrainConfig(**{**QUICK.__dict__, "threads": 2})
    assert checkpoint_path(SMALL, cache_dir, bpe_tokenizer(300, cache_dir), threaded) == path
    longer = PretrainConfig(**{**QUICK.__dict__, "steps": 7})
    assert checkpoint_path(SMALL, cache_dir, bpe_tokenizer(300, cache_dir), longer) != path


@pytest.mark.timeout(60)
def test_checkpoint_trains_and_loads_into_stages(cache_dir):
    state = starting_checkpoint(SMALL, cache_dir, pretrain_cfg=QUICK)
    fresh = build_full_model(SMALL, seed=QUICK.seed).state_dict()
    assert state.keys() == fresh.keys()
    assert not torch.equal(
        state["blocks.0.attn.c_attn.weight"], fresh["blocks.0.attn.c_attn.weight"]
    )
    full = build_full_model(SMALL, pretrained=state).eval()
    stages = [init_stage(SMALL, s, 2, pretrained=state).eval() for s in range(2)]
    ids = torch.randint(0, SMALL.vocab_size, (2, SMALL.seq_len))
    with torch.no_grad():
        torch.testing.assert_close(stages[1](stages[0](ids)), full(ids), rtol=0, atol=1e-6)
    path, _ = starting_checkpoint_path(SMALL, cache_dir, pretrain_cfg=QUICK)
    from_file = build_full_model(SMALL, pretrained=path).eval()  # a file path works too
    with torch.no_grad():
        assert torch.equal(from_file(ids), full(ids))
    assert torch.isfinite(lm_loss(full(ids), ids))


def test_large_presets_are_not_pretrained_here(cache_dir):
    with pytest.raises(ValueError, match="exceeds MAX_PRETRAIN_PARAMS"):
        starting_checkpoint_path(PRESETS["gpt2-xl"], cache_dir)
    with pytest.raises(ValueError, match="PretrainConfig.warmup_steps"):
        PretrainConfig(steps=5, warmup_steps=6)


_RACE_SCRIPT = """
import sys
from aqsgd.model.config import ModelConfig
from aqsgd.model.pretrain import PretrainConfig, starting_checkpoint_path
cfg = ModelConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=300, seq_len=16, dropout=0.0)
path, built = starting_checkpoint_path(cfg, sys.argv[1], pretrain_cfg=PretrainConfig(
    steps=5, batch_size=4, warmup_steps=1, eval_batches=0, corpus_chars=100_000))
print(int(built), path)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_concurrent_builders_build_once(cache_dir):
    procs = [
        subprocess.Popen([sys.executable, "-c", _RACE_SCRIPT, str(cache_dir)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]  # fmt: skip
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=80)
        assert proc.returncode == 0, err
        results.append(out.split())
    assert sorted(r[0] for r in results) == ["0", "1"]  # one built, the other waited and reused
    assert results[0][1] == results[1][1]
    torch.load(results[0][1], weights_only=True)  # complete, readable file
    assert not list((cache_dir / "checkpoints").glob(".*.tmp"))


@pytest.mark.timeout(60)
def test_cli_reports_reuse(cache_dir, capsys, monkeypatch):
    monkeypatch.setitem(PRESETS, "tiny", SMALL)
    argv = ["--preset", "tiny", "--cache-dir", str(cache_dir), "--steps", "6", "--batch-size", "4"]
    argv += ["--corpus-chars", "100000"]
    main(argv)
    main(argv)
    out = capsys.readouterr().out
    assert "built starting checkpoint" in out and "reusing starting checkpoint" in out


@pytest.mark.timeout(120)
def test_two_builds_of_one_key_give_the_same_weights(cache_dir):
    """Dropout masks are drawn from a generator seeded by the pre-training seed, so a
    fresh clone builds the same starting checkpoint as any other (and the caller's global
    random state is left as it was)."""
    cfg = dataclasses.replace(SMALL, dropout=0.1)
    tokenizer = bpe_tokenizer(cfg.vocab_size, cache_dir)
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    first, _ = pretrain(cfg, tokenizer, QUICK)
    after_first = torch.rand(3)
    second, _ = pretrain(cfg, tokenizer, QUICK)
    assert torch.equal(after_first, before)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
