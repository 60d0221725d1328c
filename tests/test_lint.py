"""The lint step: ruff (configured in pyproject.toml) formats the notebooks and finds nothing in the package.

`.ci/run` runs the same two commands before the tests; this file also proves the step can fail.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUFF = [sys.executable, "-m", "ruff"]


def ruff(*args, cwd=ROOT):
    "Run ruff with the project's configuration; returns the CompletedProcess."
    return subprocess.run([*RUFF, *args, "--config", str(ROOT / "pyproject.toml")], cwd=cwd, capture_output=True,
                          text=True)


def test_package_lint_clean():
    r = ruff("check", "nanolit")
    assert r.returncode == 0, r.stdout[-4000:]


def test_notebook_lines_kept():
    "The notebooks' code cells (the source) keep 120 columns; the package allows nbdev's generated lines 130."
    r = ruff("check", "--select", "E501", "--config", "lint.pycodestyle.max-line-length=120", "nbs")
    assert r.returncode == 0, r.stdout[-4000:]


def test_notebooks_formatted():
    r = ruff("format", "--check", "nbs")
    assert r.returncode == 0, "run `.venv/bin/ruff format nbs`:\n" + r.stdout[-4000:]


def test_lint_fails_on_violations(tmp_path):
    "Not vacuous: `;`-joined statements, an unused import and a 130-column line are each found."
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = 1; y = 2\nz = '" + "a" * 130 + "'\n")
    r = ruff("check", "--no-cache", str(bad), cwd=tmp_path)
    assert r.returncode == 1
    for code in ("F401", "E702", "E501"):
        assert code in r.stdout, (code, r.stdout)
    r = ruff("format", "--check", "--no-cache", str(bad), cwd=tmp_path)
    assert r.returncode == 1
