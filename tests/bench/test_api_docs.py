"""docs/api.md's example runs as written (its python blocks, in order, in an empty
directory: three smoke cells on the local launcher), and `help(bench.api)` documents
every public name the page lists."""

from __future__ import annotations

import pydoc
import re

import pytest

from bench import REPO_ROOT, api

PAGE = REPO_ROOT / "docs" / "api.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_every_public_name_has_a_docstring_and_a_row_on_the_page():
    page = PAGE.read_text()
    rendered = pydoc.render_doc(api, renderer=pydoc.plaintext)
    for name in api.__all__:
        assert getattr(api, name).__doc__, f"bench.api.{name} has no docstring"
        assert f"`{name}" in page, f"docs/api.md does not list bench.api.{name}"
        assert name in rendered


@pytest.mark.slow
@pytest.mark.workers
def test_the_pages_example_runs_as_written(tmp_path, monkeypatch, capsys):
    blocks = _python_blocks(PAGE.read_text())
    assert blocks, "docs/api.md has no python block"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out
    assert "100mbps__aqsgd-fw2-bw4__local ok" in printed
    assert "only in A: ['100mbps__fp32__local']" in printed
