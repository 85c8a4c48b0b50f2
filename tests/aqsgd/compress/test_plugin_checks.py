"""The checks a mode passes when it is registered (aqsgd.compress.contract, .trial): one
round trip on a small batch, the types of its class attributes, a wire_format of its own.
Each defect of a plug-in file is refused naming the file, what was expected and what
came; the example plug-ins and the one in docs/plugins.md load and round-trip; a mode
that fails only while it runs names itself and its plug-in in the exception."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.contract import mismatches
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.modes.base import ActivationMode
from aqsgd.compress.registry import (
    ACTIVATION_MODES,
    COMPARISONS,
    RegistryError,
    load_plugins,
    unload_plugins,
)
from aqsgd.compress.trial import TRIAL_SHAPE, round_trip
from aqsgd.quant import QuantConfig

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples" / "plugins").glob("*.py"))
# a mode that sends the change since the last visit in fp16; each case below breaks it once
MODE = '''
import torch
from aqsgd.compress.modes.base import ActivationMode, Comparison

class Delta(ActivationMode):
    name, rank, wire_format = "{name}", 8.5, 71
    uses_cache = True
    bench_cases, smoke_case = (("fp32", 16),), ("fp32", 8)

    @classmethod
    def coded_spec(cls, cfg, q_shape):
        return [(tuple(q_shape), torch.float16)]

    def encode(self, rows, generator, m=None):
        delta = (rows - m).half()
        m += delta.float()
        return [delta]

    def decode(self, coded, q_shape, m=None):
        m += coded[0].float()
        return m

MODE = Delta
COMPARISONS = (Comparison("{name}", rank=8.5, forward="{name}", backward="directq",
                          default_bits=(8, 8)),)
'''
DEFECTS = {  # name: (the edit of MODE, what the error says)
    "wrongshape": ("        return m\n", "        return m.reshape(q_shape[0], -1)\n",
                   r"activation mode 'wrongshape' decode returned shape \(3, 256\) "
                   r"torch.float32, expected \(3, 4, 64\) torch.float32"),
    "wrongdtype": ("        return [delta]\n", "        return [delta.float()]\n",
                   r"encode returned tensor 0 of shape \(3, 4, 64\) torch.float32, expected "
                   r"\(3, 4, 64\) torch.float16 \(coded_spec"),
    "sameformat": ("8.5, 71\n", "8.5, 3\n",
                   r"activation mode 'sameformat' has wire_format 3, which activation mode "
                   r"'aqsgd' \(aqsgd.compress.modes.aqsgd\) has already"),
    "badtype": ("    uses_cache = True\n", "    uses_cache = 'yes'\n",
                r"activation mode Delta has attributes of the wrong type .*uses_cache: "
                r"expected bool, got 'yes' \(str\)"),
    "badcases": ('("fp32", 8)\n', '("fp32", "8")\n',
                 r"smoke_case: expected tuple\[str, int\], got \('fp32', '8'\)"),
    "nonfinite": ("        return m\n", "        return m / 0\n",
                  r"decode's rows holds \d+ non-finite values of 768"),
    "nocache": ("        m += delta.float()\n", "",
                r"sender's and receiver's cache rows differ after one message"),
    "raises": ("        delta = ", "        raise RuntimeError('not today')\n        delta = ",
               r"coding \(3, 4, 64\) rows at 8 bits raised RuntimeError: not today"),
    "badbits": ('("fp32", 8)\n', '("fp32", 12)\n', r"smoke_case \('fp32', 12\) gives no "
                                                   r"config: .*bits"),
    "baddtype": ('(("fp32", 16),)', '(("fp64", 16),)',
                 r"bench_cases \('fp64', 16\): dtype 'fp64' is not one of fp32, fp16, bf16"),
    "badbits2": ("default_bits=(8, 8)", "default_bits=(8,)",
                 r"comparison 'badbits2' has attributes of the wrong type .*default_bits: "
                 r"expected tuple\[int, int\] \| None, got \(8,\)"),
}


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def loaded():
    plugins = []
    yield plugins
    unload_plugins(plugins)


def test_the_mode_all_defects_start_from_loads_and_round_trips(tmp_path, loaded):
    loaded += load_plugins([str(_write(tmp_path, "gooddelta", MODE.format(name="gooddelta")))])
    assert "gooddelta" in ACTIVATION_MODES and "gooddelta" in COMPARISONS


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_a_defective_mode_is_refused_naming_its_file_and_what_was_expected(tmp_path, name):
    old, new, words = DEFECTS[name]
    text = MODE.format(name=name)
    assert old in text
    path = _write(tmp_path, name, text.replace(old, new))
    tables = (dict(ACTIVATION_MODES), dict(COMPARISONS))
    with pytest.raises(RegistryError, match=words) as err:
        load_plugins([str(path)])
    assert str(err.value).startswith(f"plug-in {path}: {name}: ")
    assert (dict(ACTIVATION_MODES), dict(COMPARISONS)) == tables  # refused: nothing changed
    assert name not in sys.modules  # a corrected file loads again
    path.write_text(MODE.format(name=name))
    unload_plugins(load_plugins([str(path)]))


def test_a_codec_with_an_attribute_of_the_wrong_type_is_refused(tmp_path):
    path = _write(tmp_path, "copycodec", """
        from aqsgd.compress.codecs.fp32 import Fp32DataParallel
        class Copy(Fp32DataParallel):
            name, rank, compresses = 'copycodec', 9, 'no'
        CODEC = Copy
        """)
    with pytest.raises(RegistryError, match=r"gradient codec Copy has attributes of the "
                                            r"wrong type .*compresses: expected bool, got "
                                            r"'no' \(str\)"):
        load_plugins([str(path)])


def test_attribute_types_follow_the_bases_annotations():
    assert all(mismatches(mode, ActivationMode) == [] for mode in ACTIVATION_MODES.values())
    bad = type("Bad", (ActivationMode,), {"name": "bad", "rank": True, "wire_format": 2.0,
                                          "bench_cases": (("fp32", 2),), "smoke_case": "x"})
    assert mismatches(bad, ActivationMode) == [
        "rank: expected float, got True (bool)",
        "wire_format: expected int | None, got 2.0 (float)",
        "smoke_case: expected tuple[str, int], got 'x' (str)"]


@pytest.mark.parametrize("name", list(ACTIVATION_MODES))
def test_every_built_in_mode_passes_its_round_trip(name):
    round_trip(ACTIVATION_MODES[name], "built-in")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_plugin_loads(path, loaded):
    loaded += load_plugins([str(path)])
    assert loaded[0].source == str(path)


def _page_example() -> str:
    """The code block under '## A complete example' of docs/plugins.md."""
    page = (ROOT / "docs" / "plugins.md").read_text()
    section = page.split("## A complete example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_in_the_docs_registers_and_round_trips(tmp_path, loaded):
    path = tmp_path / "fp16delta.py"
    path.write_text(_page_example())
    loaded += load_plugins([str(path)])
    cfg = CompressionConfig(mode="fp16delta", quant=QuantConfig(bits=8),
                            warmup_epochs=0, first_visit="zero")
    send, recv = (make_compressor(cfg, role, (5, 24), 8) for role in ("send", "recv"))
    ids = torch.tensor([1, 4, 6])
    x = torch.randn(3, 5, 24, generator=torch.Generator().manual_seed(0))
    y = recv.decode(send.encode(x, ids), ids)
    assert torch.allclose(y, x, atol=1e-2)
    assert torch.equal(send.cache.gather(ids), recv.cache.gather(ids))


def test_a_mode_that_fails_only_in_a_run_names_itself_and_its_plugin(tmp_path, loaded):
    text = MODE.format(name="flaky").replace(
        "        delta = ", "        if rows.shape[0] > 3:\n"
                            "            raise RuntimeError('too many rows')\n        delta = ")
    path = _write(tmp_path, "flaky", text)
    loaded += load_plugins([str(path)])  # its load-time trial codes 3 rows: it passes
    assert TRIAL_SHAPE[0] == 3
    cfg = CompressionConfig(mode="flaky", warmup_epochs=0, first_visit="zero")
    send = make_compressor(cfg, "send", (4, 8), 8)
    with pytest.raises(RuntimeError, match="too many rows") as err:
        send.encode(torch.randn(4, 4, 8), torch.arange(4))
    (note,) = err.value.__notes__
    assert note.startswith(f"in encode of activation mode 'flaky' (plug-in flaky ({path}, "
                           f"sha256 ") and note.endswith("), send side")
