"""No source or documentation file over MAX_LINES lines: a longer file holds more than one
concern and is split by concern (docs/ARCHITECTURE.md). Data files (traces, JSON records
of measurements, the generated scenario schema) and the shipped checkpoints are exempt."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 450
CHECKED = (".py", ".md", ".yaml", ".yml", ".sh", ".cpp", ".h", ".toml", ".cfg")


def _tracked() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / n for n in names
            if n.endswith(CHECKED) or Path(n).name in ("Makefile", "Dockerfile")]


def test_no_source_or_doc_file_is_over_the_limit():
    files = _tracked()
    assert any(f.name == "ARCHITECTURE.md" for f in files)  # the listing found the tree
    long = {str(f.relative_to(ROOT)): n for f in files if f.is_file()
            and (n := len(f.read_text(errors="replace").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split by concern): {long}"
