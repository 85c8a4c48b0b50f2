"""Compressor plug-ins (aqsgd.compress.plugins, registry.load_plugins): a file, a module
and an installed package's entry point register like the built-ins; every list of modes
follows; a colliding name or a broken contract is refused naming the module; a worker's
config loads its plug-ins and refuses a copy that differs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from plugin_helpers import sign_mode

from aqsgd.compress import gradient, message, registry
from aqsgd.compress.plugins import PluginError, entry_point_modules, identify
from aqsgd.compress.registry import (
    ACTIVATION_MODES,
    COMPARISONS,
    GRAD_CODECS,
    RegistryError,
    load_plugins,
    plugins_of,
    require_plugins,
    unload_plugins,
)
from aqsgd.train.config import ConfigError, RunConfig, config_from_dict
from bench.harness import modes as harness_modes

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "randproj.py"
def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def loaded():
    """Plug-ins a test loads, unloaded after it (the tables are the process's)."""
    plugins = []
    yield plugins
    unload_plugins(plugins)


def test_a_file_plugin_registers_its_mode_and_comparison_and_every_list_follows(loaded):
    before = (tuple(ACTIVATION_MODES), tuple(COMPARISONS))
    loaded += load_plugins([str(EXAMPLE)])
    (plugin,) = loaded
    assert (plugin.module, plugin.version, plugin.source) == ("randproj", "0.1", str(EXAMPLE))
    assert list(ACTIVATION_MODES).index("randproj") == list(ACTIVATION_MODES).index("aqsgd") + 1
    assert COMPARISONS["randproj"].backward == "directq"
    assert message.MODES == tuple(ACTIVATION_MODES) and "randproj" in message.MODES
    assert "randproj" not in message.GRADIENT_MODES  # it codes against the cache
    assert harness_modes.MODE_NAMES == tuple(COMPARISONS)
    assert harness_modes.DEFAULT_BITS["randproj"] == (4, 8)
    assert harness_modes.default_grid()[-1] == "randproj"
    assert plugins_of("randproj") == (plugin,) and plugins_of("aqsgd") == ()
    assert harness_modes.parse_mode("randproj:2/4").plugins == (plugin,)
    assert load_plugins([str(EXAMPLE)]) == (plugin,)  # twice: the same, registered once
    unload_plugins(loaded)
    assert (tuple(ACTIVATION_MODES), tuple(COMPARISONS)) == before
    assert "randproj" not in harness_modes.MODE_NAMES and "randproj" not in sys.modules
    loaded.clear()


def test_a_module_plugin_on_the_path_loads_by_name(tmp_path, monkeypatch, loaded):
    _write(tmp_path, "sign_plugin", sign_mode("sign"))
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded += load_plugins(["sign_plugin"])
    assert loaded[0].source == "sign_plugin" and "sign" in message.GRADIENT_MODES
    assert harness_modes.parse_mode("sign").name == "sign"


def test_an_installed_packages_entry_point_is_found(tmp_path, monkeypatch):
    package = tmp_path / "signpkg"
    package.mkdir()
    _write(package, "__init__", "")
    _write(package, "modes", sign_mode("signpkg"))
    info = tmp_path / "signpkg-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: signpkg\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[aqsgd.compressors]\nsign = signpkg.modes\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [(m.__name__, v) for m, v in entry_point_modules()]
    assert ("signpkg.modes", "0.3") in found
    module = sys.modules["signpkg.modes"]
    plugin = identify(module, module.__name__, "0.3")
    assert plugin.version == "0.3"
    _write(package, "helper", "X = 1\n")  # a file of its package is part of its source
    assert identify(module, module.__name__, "0.3").sha256 != plugin.sha256


@pytest.mark.parametrize("body, words", [
    (sign_mode("directq"), r"'directq' is declared by both "
                                       r"aqsgd.compress.modes.directq and clash"),
    ("X = 1\n", "declares none of MODE, COMPARISONS, CODEC"),
    ("MODE = int\n", "clash.MODE must be an ActivationMode subclass"),
    (sign_mode("clash").replace("    def encode", "    def encode_"),
     "codes rows but does not implement encode"),
    (sign_mode("clash").replace('backward="clash")',
                                            'backward="clash", speedup_reference=True)'),
     "may not be a speed-up reference"),
    ("from aqsgd.compress.codecs.base import DataParallel\n"
     "class C(DataParallel):\n    name, rank = 'clashcodec', 9\nCODEC = C\n",
     "gradient codec 'clashcodec' does not implement synchronize, exchange_nbytes, "
     "round_trip"),
])
def test_a_colliding_or_broken_plugin_is_refused_naming_its_file(tmp_path, body, words):
    path = _write(tmp_path, "clash", body)
    tables = (dict(ACTIVATION_MODES), dict(COMPARISONS), dict(GRAD_CODECS))
    with pytest.raises(RegistryError, match=words) as err:
        load_plugins([str(path)])
    assert str(path) in str(err.value)
    assert (dict(ACTIVATION_MODES), dict(COMPARISONS), dict(GRAD_CODECS)) == tables
    assert "clash" not in sys.modules  # a corrected file loads again


def test_a_missing_or_failing_plugin_is_refused_naming_it(tmp_path):
    with pytest.raises(PluginError, match=r"plug-in file .*nothere.py does not exist"):
        load_plugins([str(tmp_path / "nothere.py")])
    with pytest.raises(PluginError, match=r"plug-in module 'no_such_plugin' cannot be "
                                          r"imported"):
        load_plugins(["no_such_plugin"])
    path = _write(tmp_path, "broken_plugin", "raise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match=r"broken_plugin.py: importing it failed: "
                                          r"RuntimeError: boom"):
        load_plugins([str(path)])
    assert "broken_plugin" not in sys.modules
    with pytest.raises(PluginError, match="its module name 'json' is taken"):
        load_plugins([str(_write(tmp_path, "json", "X = 1\n"))])


def test_a_run_config_loads_its_plugins_and_refuses_another_copy(tmp_path, loaded):
    path = tmp_path / "randproj.py"
    path.write_text(EXAMPLE.read_text())
    (plugin,) = load_plugins([str(path)])
    config = RunConfig(forward=message.CompressionConfig(mode="randproj"),
                       plugins=(plugin,)).to_dict()
    unload_plugins([plugin])
    assert "randproj" not in ACTIVATION_MODES
    loaded.append(plugin)
    # a worker: the config's plug-ins load before its modes are checked
    assert config_from_dict(config).plugins == (plugin,)
    assert registry.PLUGINS["randproj"] == plugin
    unload_plugins([plugin])
    path.write_text(EXAMPLE.read_text() + "\n# edited on one host only\n")
    with pytest.raises(ConfigError, match=r"plugins: plug-in randproj: this host's copy "
                                          r"\(randproj 0.1 .* is not the one the run"):
        config_from_dict(config)
    unload_plugins([plugin])
    path.unlink()
    with pytest.raises(ConfigError, match=r"plugins: plug-in file .*randproj.py does not "
                                          r"exist on this host"):
        config_from_dict(config)
    with pytest.raises(ConfigError, match=r"plugins\[0\]: expected a mapping of module"):
        config_from_dict({**config, "plugins": ["randproj.py"]})


def test_a_worker_without_a_plugin_that_is_loaded_already_checks_its_hash(loaded):
    loaded += load_plugins([str(EXAMPLE)])
    require_plugins(loaded)  # loaded and the same: nothing to do
    other = type(loaded[0])(**{**loaded[0].to_dict(), "sha256": "0" * 16})
    with pytest.raises(PluginError, match="plug-in randproj: this host's copy"):
        require_plugins([other])


def test_gradient_lists_follow_a_codec_plugin(tmp_path, loaded):
    body = ("from aqsgd.compress.codecs.fp32 import Fp32DataParallel\n"
            "class Copy(Fp32DataParallel):\n    name, rank, compresses = 'copy', 9, False\n"
            "CODEC = Copy\n")
    loaded += load_plugins([str(_write(tmp_path, "copy_codec", body))])
    assert gradient.GRAD_MODES[-1] == "copy"
    assert gradient.GradCompressionConfig(mode="copy").mode == "copy"
    assert "copy" not in harness_modes.GRAD_COMPRESSORS  # it compresses nothing
