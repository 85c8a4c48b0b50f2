"""The registry does its work on first use, not at import (aqsgd.compress.registry,
Note [first use]): importing it imports no mode, codec or plug-in; an installed plug-in
that fails to import or breaks the contract is left out with a warning naming its entry
point, the built-ins and the other plug-ins still run, and asking for it names it again.
Each runs in a fresh interpreter, as the first use of a process is what is tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from plugin_helpers import sign_mode

ROOT = Path(__file__).resolve().parents[3]
ENTRY_POINTS = {"broken": "brokenpkg", "bad": "badpkg.modes", "good": "goodpkg.modes"}


def _install(site: Path) -> None:
    """Three plug-in packages and the metadata that lists their entry points, as `pip
    install` leaves them: one raises on import, one decodes the wrong shape, one is good."""
    for package, text in (("brokenpkg", "raise RuntimeError('boom')\n"),
                          ("badpkg", sign_mode("badmode", fmt=81,
                                               defect=".reshape(q_shape[0], -1)")),
                          ("goodpkg", sign_mode("goodmode", fmt=82))):
        (site / package).mkdir()
        init, modes = site / package / "__init__.py", site / package / "modes.py"
        init.write_text(text if package == "brokenpkg" else "")
        if package != "brokenpkg":
            modes.write_text(textwrap.dedent(text))
    info = site / "fakeplugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[aqsgd.compressors]\n" + "".join(f"{k} = {v}\n" for k, v in ENTRY_POINTS.items()))


def _fresh(script: str, site: Path | None = None) -> dict:
    """Run `script` in a fresh interpreter (with `site` on its path); the JSON it prints."""
    path = [str(ROOT)] + ([str(site)] if site else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_registry_imports_no_mode_codec_or_plugin():
    out = _fresh("""
        import json, sys
        import aqsgd.compress.registry as registry
        prefix = ("aqsgd.compress.modes", "aqsgd.compress.codecs", "aqsgd.compress.trial",
                  "aqsgd.compress.contract", "aqsgd.compress.message")
        at_import = sorted(m for m in sys.modules if m.startswith(prefix))
        names = list(registry.ACTIVATION_MODES)
        print(json.dumps({"at_import": at_import, "names": names,
                          "after": sorted(m for m in sys.modules if m.startswith(prefix))}))
        """)
    assert out["at_import"] == []
    assert "aqsgd" in out["names"] and "aqsgd.compress.modes.aqsgd" in out["after"]


def test_a_broken_installed_plugin_is_left_out_and_named_with_its_entry_point(tmp_path):
    _install(tmp_path)
    out = _fresh("""
        import json, warnings
        from aqsgd.compress.plugins import PluginError
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import aqsgd.compress.registry as registry
            imported = [str(w.message) for w in caught]
            modes = list(registry.ACTIVATION_MODES)
        out = {"imported": imported, "modes": modes, "warned": [str(w.message) for w in caught],
               "broken": dict(registry.BROKEN_PLUGINS),
               "plugins": [p.module for p in registry.PLUGINS.values()]}
        try:
            registry.load_plugins(["brokenpkg"])
        except PluginError as err:
            out["load"] = str(err)
        from aqsgd.compress.message import CompressionConfig
        try:
            CompressionConfig(mode="badmode")
        except ValueError as err:
            out["config"] = str(err)
        print(json.dumps(out))
        """, site=tmp_path)
    assert out["imported"] == []  # nothing happens at import
    assert "aqsgd" in out["modes"] and "goodmode" in out["modes"]
    assert "badmode" not in out["modes"] and out["plugins"] == ["goodpkg.modes"]
    broken = ("entry point 'broken' = 'brokenpkg' of group aqsgd.compressors: importing "
              "brokenpkg failed: RuntimeError: boom")
    bad = ("entry point 'bad' = 'badpkg.modes' of group aqsgd.compressors: plug-in "
           "badpkg.modes: badpkg.modes: activation mode 'badmode' decode returned shape "
           "(3, 256) torch.float32, expected (3, 4, 64) torch.float32 (the rows')")
    assert out["broken"] == {"bad": bad, "broken": broken}
    assert out["warned"] == [f"{bad}; the suite runs without it",
                             f"{broken}; the suite runs without it"]
    assert out["load"] == broken
    assert out["config"].startswith("CompressionConfig.mode must be one of ")
    assert bad in out["config"] and broken in out["config"]
