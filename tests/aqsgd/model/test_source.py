"""Which model and tokenizer a run takes (aqsgd.model.source): a preset, a save_pretrained
folder, a model id in the local hub cache or a state-dict file, with the checkpoint's own
tokenizer; a checkpoint without one, or with another vocabulary, refused."""

import pytest
import torch
from transformers import GPT2Config

from aqsgd.data.tokenizer import train_bpe
from aqsgd.model.config import PRESETS
from aqsgd.model.source import ModelSourceError, resolve_model, run_tokenizer


def _tokenizer(vocab: int):
    return train_bpe([f"the river {i} flows past the town ." for i in range(200)], vocab)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A save_pretrained-style folder: config.json and the tokenizer it was trained with."""
    path = tmp_path_factory.mktemp("my-gpt2")
    GPT2Config(n_layer=3, n_embd=48, n_head=3, vocab_size=290, n_positions=40,
               resid_pdrop=0.0, activation_function="gelu").save_pretrained(path)
    _tokenizer(290).save(str(path / "tokenizer.json"))
    return path


def test_a_folder_gives_its_shape_weights_and_tokenizer(folder):
    choice = resolve_model(str(folder), "tiny")
    assert choice.config == PRESETS["tiny"].replace(
        n_layer=3, n_embd=48, n_head=3, vocab_size=290, seq_len=40, dropout=0.0, n_inner=None)
    assert choice.weights == str(folder) and choice.tokenizer == str(folder / "tokenizer.json")
    assert len(choice.tokenizer_digest()) == 16
    assert resolve_model(str(folder), "tiny", seq_len=16).config.seq_len == 16
    with pytest.raises(ModelSourceError, match="seq_len 64 exceeds the 40 positions"):
        resolve_model(str(folder), "tiny", seq_len=64)
    tok = run_tokenizer(choice.tokenizer, 290, checkpoint=choice.weights)
    assert tok.vocab_size == 290


def test_a_model_id_is_found_in_the_local_hub_cache(folder, tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--someone--my-gpt2"
    snapshot = repo / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (snapshot / name).write_bytes((folder / name).read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("rev1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    choice = resolve_model("someone/my-gpt2", "tiny")
    assert choice.weights == str(snapshot) and choice.config.n_layer == 3
    with pytest.raises(ModelSourceError, match=r"model 'someone/other' is neither a path nor "
                                               r"a model id in the local Hugging Face cache"):
        resolve_model("someone/other", "tiny")


def test_a_state_dict_file_takes_the_preset_shape_and_the_tokenizer_beside_it(tmp_path):
    torch.save({}, tmp_path / "weights.pt")
    with pytest.raises(ModelSourceError, match=r"pretrained checkpoint .*weights.pt has no "
                                               r"tokenizer: looked for tokenizer.json or "
                                               r"vocab.json \+ merges.txt .* in " + str(tmp_path)):
        resolve_model(str(tmp_path / "weights.pt"), "tiny")
    _tokenizer(384).save(str(tmp_path / "tokenizer.json"))
    choice = resolve_model(str(tmp_path / "weights.pt"), "tiny")
    assert choice.config == PRESETS["tiny"] and choice.weights == str(tmp_path / "weights.pt")


def test_another_vocabulary_is_refused_naming_both_sizes(folder, tmp_path):
    other = tmp_path / "other.json"
    _tokenizer(300).save(str(other))
    choice = resolve_model(str(folder), "tiny", tokenizer=str(other))
    with pytest.raises(ModelSourceError, match="has 300 tokens, the checkpoint's vocabulary "
                                               "290: they must match") as err:
        run_tokenizer(choice.tokenizer, choice.config.vocab_size, checkpoint=choice.weights)
    assert err.value.setting == "tokenizer"
    # a preset trained from random weights takes any tokenizer whose ids fit its embeddings
    assert run_tokenizer(str(other), 384, checkpoint=None).vocab_size == 300
    with pytest.raises(ModelSourceError, match="has 300 tokens, the model's vocabulary 290"):
        run_tokenizer(str(other), 290, checkpoint=None)


def test_a_run_config_naming_a_folder_takes_its_tokenizer_or_is_refused(folder, tmp_path):
    # a run config's train.init_from folder with no data.tokenizer: the folder's own
    assert run_tokenizer(None, 290, checkpoint=str(folder)).vocab_size == 290
    with pytest.raises(ModelSourceError, match="has no tokenizer: looked for"):
        run_tokenizer(None, 290, checkpoint=str(tmp_path))


def test_a_preset_keeps_the_suites_tokenizer():
    choice = resolve_model(None, "tiny-4")
    assert (choice.config, choice.weights, choice.tokenizer) == (PRESETS["tiny-4"], None, None)
    assert choice.tokenizer_digest() is None
