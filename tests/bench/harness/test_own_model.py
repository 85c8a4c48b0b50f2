"""Your own model, tokenizer and data, from files on disk to a cell (docs/models.md): a
GPT-2 saved with `save_pretrained`, a tokenizer trained and saved with the tokenizers
library, a WikiText-layout folder. A real cell runs from them; a checkpoint with no
tokenizer, one with another vocabulary and data too short for its windows are refused
before any process starts (exit 2, the reason named)."""

from __future__ import annotations

import json

import pytest
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from aqsgd.data.tokenizer import files_digest
from bench.__main__ import main
from bench.harness.run import run_sweep
from bench.harness.sweep import SweepSpec, Workload, parse_mode

VOCAB = 320
LINES = [f" = Section {i} = \n\n" + " ".join(f"The river {j} flows past town {i} ."
                                            for j in range(12)) + " \n\n" for i in range(300)]


def _train_tokenizer(vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(LINES, trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{model, notok, other, wiki}: a save_pretrained folder with its tokenizer.json, the
    same weights without one, another tokenizer, and WikiText's raw layout."""
    from transformers import GPT2Config, GPT2LMHeadModel

    root = tmp_path_factory.mktemp("own")
    wiki = root / "wikitext-2-raw"
    wiki.mkdir()
    for name, lines in (("train", LINES[:260]), ("valid", LINES[260:285]),
                        ("test", LINES[285:])):
        (wiki / f"wiki.{name}.raw").write_text("".join(lines))
    model = root / "my-gpt2"
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32)
    GPT2LMHeadModel(config).save_pretrained(model)
    _train_tokenizer(VOCAB).save(str(model / "tokenizer.json"))
    notok = root / "no-tokenizer"
    GPT2LMHeadModel(config).save_pretrained(notok)
    other = root / "other-tokenizer.json"
    _train_tokenizer(300).save(str(other))
    return {"model": model, "notok": notok, "other": other, "wiki": wiki}


def _bench_run(files, tmp_path, *flags: str) -> list[str]:
    return ["run", "--scenario", "100mbps", "--modes", "fp32", "--stages", "2",
            "--data", "wikitext", "--data-path", str(files["wiki"]), "--steps", "2",
            "--train-samples", "64", "--eval-samples", "16", "--reference", "none",
            "--launcher", "local", "--out", str(tmp_path / "out"), "--dry-run", *flags]


def test_a_checkpoint_without_its_tokenizer_is_refused_saying_where_it_looked(
        files, tmp_path, capsys):
    assert main(_bench_run(files, tmp_path, "--model", str(files["notok"]))) == 2
    err = capsys.readouterr().err
    assert f"--tokenizer: cell 100mbps__fp32: pretrained checkpoint {files['notok']} has no " \
           f"tokenizer: looked for tokenizer.json or vocab.json + merges.txt" in err
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_of_another_vocabulary_is_refused_naming_both_sizes(files, tmp_path,
                                                                          capsys):
    argv = _bench_run(files, tmp_path, "--model", str(files["model"]),
                      "--tokenizer", str(files["other"]))
    assert main(argv) == 2
    assert (f"--tokenizer: cell 100mbps__fp32: tokenizer {files['other']} has 300 tokens, "
            f"the checkpoint's vocabulary {VOCAB}: they must match") in capsys.readouterr().err


def test_data_too_short_for_the_windows_is_refused_saying_what_fits(files, tmp_path, capsys):
    argv = _bench_run(files, tmp_path, "--model", str(files["model"]),
                      "--train-samples", "5000")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--train-samples: cell 100mbps__fp32: data set 'wikitext' gives " in err
    assert "fewer than the 5000 asked: ask at most " in err and "seq_len at most" in err
    assert main(_bench_run(files, tmp_path, "--model", str(files["model"]))) == 0  # fits


def test_a_model_with_fewer_blocks_than_stages_is_refused(files, tmp_path, capsys):
    argv = _bench_run(files, tmp_path, "--model", str(files["model"]), "--stages", "4")
    assert main(argv) == 2
    assert (f"--stages: cell 100mbps__fp32: model {files['model']} has 2 blocks, fewer than "
            f"its 4 stages") in capsys.readouterr().err


def test_a_gpt2_preset_without_gpt2s_tokenizer_is_refused_before_anything_starts(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    argv = ["run", "--scenario", "100mbps", "--modes", "fp32", "--stages", "2",
            "--preset", "gpt2", "--out", str(tmp_path / "out"), "--dry-run"]
    assert main(argv) == 2
    assert ("a model of 50257 tokens needs GPT-2's tokenizer (vocab.json + merges.txt of "
            "openai-community/gpt2 in the local Hugging Face cache") in capsys.readouterr().err


def test_the_settings_reach_config_yaml_and_the_tokenizer_the_identity(files, tmp_path):
    from bench.harness.cells import run_config
    from bench.harness.meta import expected_identity
    from bench.harness.sweep import CellSpec
    from bench.launch.choice import LauncherChoice
    from bench.launch.local import LocalLauncher

    local = LauncherChoice("local", "test", factory=LocalLauncher)
    own = Workload(model=str(files["model"]), data="wikitext", data_path=str(files["wiki"]),
                   seq_len=16)
    cell = CellSpec("100mbps", parse_mode("fp32"), own)
    config = run_config(cell, tmp_path)
    assert (config.model.n_layer, config.model.vocab_size, config.model.seq_len) == (2, VOCAB,
                                                                                      16)
    assert config.train.init_from == str(files["model"])
    assert (config.data.name, config.data.path) == ("wikitext", str(files["wiki"]))
    assert config.data.tokenizer == str(files["model"] / "tokenizer.json")
    identity = expected_identity(cell, None, local, "abc")
    assert identity["tokenizer"] == files_digest([files["model"] / "tokenizer.json"])
    default = CellSpec("100mbps", parse_mode("fp32"), Workload())
    assert "tokenizer" not in expected_identity(default, None, local, "abc")
    assert run_config(default, tmp_path).data.tokenizer is None


@pytest.mark.workers
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_cell_runs_from_a_save_pretrained_folder_on_wikitext(files, tmp_path):
    workload = Workload(steps=2, train_samples=64, eval_samples=16, timeout_s=200,
                        model=str(files["model"]), data="wikitext",
                        data_path=str(files["wiki"]))
    spec = SweepSpec("own", ("100mbps",), (parse_mode("aqsgd:2/4"),), workload)
    out = tmp_path / "results"
    outcomes = run_sweep(spec, out, launcher="local", quiet=True, echo=lambda s: None)
    assert [o.status for o in outcomes] == ["ok"], outcomes
    cell = out / outcomes[0].name
    meta = json.loads((cell / "meta.json").read_text())
    assert meta["identity"]["tokenizer"] == files_digest([files["model"] / "tokenizer.json"])
    config = yaml.safe_load((cell / "config.yaml").read_text())
    assert (config["model"]["vocab_size"], config["model"]["seq_len"]) == (VOCAB, 32)
    assert config["train"]["init_from"] == str(files["model"])
    assert config["data"]["tokenizer"] == str(files["model"] / "tokenizer.json")
    records = [json.loads(line) for line in (cell / "metrics" / "rank1.jsonl").open()]
    losses = [r["eval_loss"] for r in records if r.get("kind") == "eval"]
    assert losses and 0 < losses[-1] < 7  # ln(320) = 5.8 for a random GPT-2


# `make regress`'s 100mbps fp32 cell as meta.json recorded it at commit 46f3a2f, before
# the model, tokenizer and data settings existed: its workload and spec_key
RECORDED_WORKLOAD = {
    "dist_timeout_s": 60.0, "dropout": None, "dropout_masks": "random", "epochs": 0,
    "eval_each_epoch": False, "eval_samples": 128, "gc_replicas": 2, "gc_stages": 0,
    "init_from": None, "lr": 0.0001, "micro_batch_size": 16, "num_micro_batches": 4,
    "overrides": {}, "preset": "tiny", "replicas": 1, "seed": 0, "stages": 2, "steps": 8,
    "threads": 1, "timeout_s": 300.0, "train_samples": 128, "variant": "",
    "warmup_epochs": 1}
RECORDED_KEY = "baf3cd4b0d41c23e"


def test_the_settings_at_their_defaults_leave_a_recorded_cells_key_as_it_was():
    from bench.harness.sweep import CellSpec

    cell = CellSpec("100mbps", parse_mode("fp32"), Workload(**RECORDED_WORKLOAD))
    assert cell.key == RECORDED_KEY
    for change in ({"data": "stdlib"}, {"seq_len": 32}, {"model": "x"}, {"tokenizer": "y"},
                   {"data_path": "z"}):
        other = CellSpec(cell.scenario, cell.mode, Workload(**{**RECORDED_WORKLOAD, **change}))
        assert other.key != cell.key, change


def test_a_preset_beside_a_model_folder_is_refused_naming_both(tmp_path, capsys):
    folder = tmp_path / "my-gpt2"
    folder.mkdir()
    argv = ["run", "--scenario", "100mbps", "--preset", "tiny", "--model", str(folder),
            "--dry-run"]
    assert main(argv) == 2
    assert f"--preset tiny beside --model {folder}" in capsys.readouterr().err


def test_a_model_folder_cell_builds_no_preset_checkpoint(tmp_path):
    from bench.harness.prebuild import prepare_checkpoints
    from bench.harness.sweep import CellSpec

    folder = tmp_path / "my-gpt2"
    folder.mkdir()
    own = CellSpec("100mbps", parse_mode("fp32"), Workload(model=str(folder)))
    assert Workload().checkpoint_preset == "tiny"  # a preset cell fine-tunes its checkpoint
    assert own.workload.checkpoint_preset is None
    said: list[str] = []
    assert prepare_checkpoints([own], tmp_path, said.append) == [] and said == []
