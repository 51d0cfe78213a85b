"""The package itself: the blocking client is what scripts/unasync.py makes of the async one, and
``python -m build`` makes a typed wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from .conftest import PKG


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    r = subprocess.run([sys.executable, str(PKG / "scripts" / "unasync.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_wheel_builds_with_its_type_information(tmp_path: Path) -> None:
    # --no-isolation: the build backend is in the test venv (requirements-test.txt); publishing uses
    # `python -m build packages/python`, which fetches it by itself.
    r = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", str(tmp_path), str(PKG)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    [wheel] = tmp_path.glob("sandboxd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("sandboxd/py.typed", "sandboxd/_sync/sandbox.py", "sandboxd/_async/sandbox.py", "sandboxd/errors.py"):
        assert needed in names, names
    meta = zipfile.ZipFile(wheel).read([n for n in names if n.endswith("METADATA")][0]).decode()
    assert "Requires-Python: >=3.9" in meta and "Requires-Dist: httpx" in meta
    assert list(tmp_path.glob("sandboxd-*.tar.gz"))


def test_the_sources_are_python_3_9() -> None:
    import ast

    for f in sorted((PKG / "src").rglob("*.py")):
        ast.parse(f.read_text(), str(f), feature_version=(3, 9))
        assert "from __future__ import annotations" in f.read_text() or f.name in ("__init__.py", "_version.py"), f


def test_the_type_hints_hold(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "--no-error-summary", str(PKG / "src" / "sandboxd")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
