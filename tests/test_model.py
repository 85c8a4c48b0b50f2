"""Stage models: composition equals the full model, splits, presets, pretrained loading."""

import pytest
import torch
from transformers import GPT2LMHeadModel

from aqsgd.model.config import PRESETS, TINY_PIPELINE, ModelConfig, layer_split
from aqsgd.model.gpt2 import GPT2Stage, build_full_model, build_stage, init_stage, lm_loss
from aqsgd.model.weights import load_pretrained_state
from bench.micro.stages import comm_to_compute_ratio, main, measure_stages

# 4 layers so that 1..4 stages all have a block; dropout off for exact comparisons.
SMALL = ModelConfig(n_layer=4, n_embd=32, n_head=2, vocab_size=97, seq_len=16, dropout=0.0)


def _ids(cfg, batch=3, length=None, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, length or cfg.seq_len), generator=gen)


def _compose(stages, ids):
    x = ids
    for stage in stages:
        x = stage(x)
    return x


@pytest.mark.timeout(30)
@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_stages_compose_to_full_model(num_stages):
    full = build_full_model(SMALL, seed=3).eval()
    ids = _ids(SMALL)
    expected = full(ids)
    assert expected.shape == (3, SMALL.seq_len, SMALL.vocab_size)
    stages = [build_stage(full, SMALL, s, num_stages).eval() for s in range(num_stages)]
    for s in range(num_stages - 1):
        out = _compose(stages[: s + 1], ids)
        assert out.shape == (3, SMALL.seq_len, SMALL.n_embd), f"stage {s} output"
    torch.testing.assert_close(_compose(stages, ids), expected, rtol=0, atol=1e-6)
    # Built directly from the seed, without the full model: the same weights.
    direct = [init_stage(SMALL, s, num_stages, seed=3).eval() for s in range(num_stages)]
    for a, b in zip(stages, direct, strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for key in sa:
            assert torch.equal(sa[key], sb[key]), key


@pytest.mark.timeout(30)
def test_stage_names_are_global_and_partition_the_full_model():
    full = build_full_model(SMALL, seed=0)
    stages = [build_stage(full, SMALL, s, 3) for s in range(3)]
    names = [set(dict(s.named_parameters())) for s in stages]
    assert set.union(*names) == set(dict(full.named_parameters()))
    assert sum(len(n) for n in names) == len(list(full.parameters()))
    assert "blocks.3.attn.c_attn.weight" in names[2] and "embed.wte.weight" in names[0]
    assert "head.lm_head.weight" in names[2]
    # Copies: training a stage leaves the full model alone.
    with torch.no_grad():
        stages[0].embed.wte.weight.add_(1.0)
    assert not torch.equal(stages[0].embed.wte.weight, full.embed.wte.weight)


@pytest.mark.timeout(30)
def test_gradients_of_split_match_full_model():
    full = build_full_model(SMALL, seed=5)
    stages = [build_stage(full, SMALL, s, 2) for s in range(2)]
    ids = _ids(SMALL)
    lm_loss(full(ids), ids).backward()
    hidden = stages[0](ids)
    received = hidden.detach().requires_grad_()
    lm_loss(stages[1](received), ids).backward()
    hidden.backward(received.grad)
    grads = {n: p.grad for n, p in full.named_parameters()}
    for stage in stages:
        for name, p in stage.named_parameters():
            torch.testing.assert_close(p.grad, grads[name], rtol=0, atol=1e-6, msg=name)


def test_dropout_changes_training_output():
    cfg = SMALL.replace(dropout=0.5)
    model = build_full_model(cfg, seed=0).train()
    ids = _ids(cfg)
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    assert torch.equal(model(ids), model(ids))


def test_layer_split_balanced():
    assert layer_split(4, 2) == [range(0, 2), range(2, 4)]
    assert layer_split(48, 8) == [range(6 * i, 6 * i + 6) for i in range(8)]
    splits = layer_split(10, 4)
    assert [len(r) for r in splits] == [3, 3, 2, 2]
    assert [i for r in splits for i in r] == list(range(10))
    assert layer_split(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]


@pytest.mark.parametrize(
    ("n_layer", "num_stages", "match"),
    [(2, 3, r"num_stages \(3\).*n_layer \(2\)"), (4, 0, "num_stages"), (0, 1, "n_layer")],
)
def test_layer_split_errors(n_layer, num_stages, match):
    with pytest.raises(ValueError, match=match):
        layer_split(n_layer, num_stages)


def test_stage_index_error():
    with pytest.raises(ValueError, match=r"stage must be in \[0, 2\), got 2"):
        init_stage(SMALL, 2, 2)


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_layer", 0), ("n_head", 5), ("dropout", 1.0), ("activation", "swish"), ("seq_len", 0)],
)
def test_model_config_validation_names_field(field, value):
    with pytest.raises(ValueError, match=field):
        SMALL.replace(**{field: value})


def test_preset_parameter_counts_without_allocating():
    # GPT-2's published sizes count the head tied to wte.
    assert PRESETS["gpt2"].num_parameters(untied_head=False) == 124_439_808
    assert PRESETS["gpt2-medium"].num_parameters(untied_head=False) == 354_823_168
    assert PRESETS["gpt2-xl"].num_parameters(untied_head=False) == 1_557_611_200
    xl = PRESETS["gpt2-xl"]
    assert (xl.n_layer, xl.n_embd, xl.n_head) == (48, 1600, 25)
    for name in ("tiny", "gpt2", "gpt2-xl"):
        cfg = PRESETS[name]
        with torch.device("meta"):
            model = GPT2Stage(cfg, range(cfg.n_layer), first=True, last=True)
        counted = sum(p.numel() for p in model.parameters())
        assert counted == cfg.num_parameters(), name


def test_config_hash_stable_and_sensitive():
    assert SMALL.config_hash() == SMALL.replace().config_hash()
    assert SMALL.config_hash() != SMALL.replace(dropout=0.1).config_hash()
    assert len(SMALL.config_hash()) == 16


def test_lm_loss_shifts_targets():
    vocab = 5
    ids = torch.tensor([[1, 2, 3]])
    # Logits that put all mass on the next token give ~0 loss; on the same token, high.
    right = torch.full((1, 3, vocab), -30.0)
    right[0, 0, 2] = right[0, 1, 3] = 30.0
    wrong = torch.full((1, 3, vocab), -30.0)
    wrong[0, 0, 1] = wrong[0, 1, 2] = 30.0
    assert lm_loss(right, ids).item() < 1e-6
    assert lm_loss(wrong, ids).item() > 10
    with pytest.raises(ValueError, match="do not match"):
        lm_loss(right, ids[:, :2])


@pytest.mark.timeout(60)
def test_pretrained_from_local_directory_matches_hf(tmp_path):
    cfg = SMALL.replace(activation="gelu_new")
    hf_cfg = cfg.replace(seq_len=32).hf_config()  # longer wpe than we use: sliced on load
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(hf_cfg).eval()
    hf.save_pretrained(tmp_path / "gpt2-small-test")
    model = build_full_model(cfg, seed=123, pretrained=tmp_path / "gpt2-small-test").eval()
    ids = _ids(cfg)
    with torch.no_grad():
        expected = hf(ids).logits
        got = model(ids)
    # Same weights, same causal attention: the HF model and ours agree.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # The head is a copy of wte, not the same storage (Note [untied LM head]).
    assert torch.equal(model.head.lm_head.weight, model.embed.wte.weight)
    assert model.head.lm_head.weight.data_ptr() != model.embed.wte.weight.data_ptr()
    # Stages built from the directory compose to the same logits.
    where = tmp_path / "gpt2-small-test"
    stages = [init_stage(cfg, s, 2, pretrained=where).eval() for s in range(2)]
    with torch.no_grad():
        torch.testing.assert_close(_compose(stages, ids), got, rtol=0, atol=1e-6)
    # The same weights inside a hub cache's repo folder (refs/main -> snapshot).
    repo = tmp_path / "hub" / "models--someone--gpt2-small-test"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd\n")
    hf.save_pretrained(repo / "snapshots" / "0123abcd")
    from_hub = build_full_model(cfg, pretrained=repo).eval()
    with torch.no_grad():
        assert torch.equal(from_hub(ids), got)
    # An HF-named state dict cuts into the same stage.
    last = build_stage(hf.state_dict(), cfg, 1, 2)
    for (name, a), b in zip(
        stages[1].state_dict().items(), last.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.timeout(30)
def test_pretrained_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="downloads are disabled"):
        load_pretrained_state(tmp_path / "nothing-here", SMALL)
    hf = GPT2LMHeadModel(SMALL.replace(n_embd=16).hf_config())
    hf.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="n_embd=16"):
        load_pretrained_state(tmp_path / "other", SMALL)


def test_state_dict_round_trip_through_pretrained_argument():
    full = build_full_model(SMALL, seed=9)
    again = build_full_model(SMALL, seed=0, pretrained=full.state_dict())
    for (name, a), b in zip(full.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.timeout(60)
def test_measure_reports_every_stage(capsys):
    rows = measure_stages(PRESETS["tiny"], 2, micro_batch_size=2, repeats=2)
    assert [r.stage for r in rows] == [0, 1]
    assert rows[0].boundary_bytes == 2 * PRESETS["tiny"].seq_len * PRESETS["tiny"].n_embd * 4
    assert rows[0].comm_ms > 0 and rows[1].comm_ms == 0
    assert all(r.compute_ms > 0 for r in rows)
    main(["--preset", "tiny", "--micro-batch-size", "2", "--repeats", "2"])
    assert "comm / slowest compute" in capsys.readouterr().out
    assert comm_to_compute_ratio(rows) == rows[0].comm_ms / max(r.compute_ms for r in rows)
    assert TINY_PIPELINE.num_stages == 2
