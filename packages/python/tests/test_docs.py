"""The examples of docs/python.md marked ``<!-- test -->`` run as written, each in a fresh
interpreter, against the daemon named by SANDBOXD_API_URL and SANDBOXD_API_KEY."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

DOC = REPO / "docs" / "python.md"


def examples() -> list:
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"<!-- test -->\n```python\n(.*?)```", text, re.S):
        line = text[: m.start()].count("\n") + 2
        heading = [h for h in re.findall(r"^## (.+)$", text[: m.start()], re.M)][-1]
        out.append(pytest.param(m.group(1), id=f"line{line}-{re.sub(r'[^a-z]+', '-', heading.lower()).strip('-')}"))
    return out


def test_the_doc_has_examples_and_every_python_block_is_tested_or_says_why_not() -> None:
    assert len(examples()) >= 15
    text = DOC.read_text()
    untested = [m.start() for m in re.finditer(r"```python\n", text) if not text[: m.start()].endswith("<!-- test -->\n")]
    # The template build example needs local files and a minute of building; tests/test_lifecycle_sync.py builds one.
    assert len(untested) == 1, untested


@pytest.mark.parametrize("code", examples())
def test_example(code: str, daemon: dict, tmp_path: Path) -> None:
    env = {**os.environ, "SANDBOXD_API_URL": daemon["base_url"], "SANDBOXD_API_KEY": daemon["api_key"]}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
