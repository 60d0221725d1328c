"""`nbdev-test` (and `nbdev.test.test_nb`, which tests/test_notebooks.py runs) must FAIL on a notebook with a syntax
error or a failing assert, and pass on the same notebook without the bad cell. Otherwise a broken notebook would
pass CI silently. The notebooks are written with nbformat into a temp project that carries this repo's
[tool.nbdev] config (so the same tst_flags apply), and `nbdev-test` runs there as a subprocess."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbdev.config import get_config
from nbdev.test import test_nb as run_notebook  # imported under another name so pytest does not collect it

ROOT = Path(__file__).resolve().parents[1]
NBDEV_TEST = Path(sys.executable).with_name("nbdev-test")

GOOD = ["# Good\n> a notebook that must pass", "x = 1 + 1", "assert x == 2, 'arithmetic'",
        "#| slow\nassert False, 'slow cells are skipped by default (tst_flags)'"]
BAD = {
    "syntax": "def f(:\n    return 1",
    "assert": "assert x == 3, 'deliberately failing assert'",
    "exception": "raise RuntimeError('deliberately raised')",
}


def _write_nb(path: Path, cells: list[str]):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(cells[0])] + [nbformat.v4.new_code_cell(c) for c in cells[1:]]
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    "A throwaway nbdev project: this repo's pyproject.toml (same [tool.nbdev]) and an nbs/ of tiny notebooks."
    d = tmp_path_factory.mktemp("nbdev_proj")
    (d / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    nbs = d / "nbs"; nbs.mkdir()
    _write_nb(nbs / "good.ipynb", GOOD)
    for name, bad in BAD.items():  # the good notebook with one bad cell inserted before its last assert
        _write_nb(nbs / f"bad_{name}.ipynb", GOOD[:2] + [bad] + GOOD[2:])
    return d


def _nbdev_test(project, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(NBDEV_TEST), *args], cwd=project, capture_output=True, text=True, env=env, timeout=120)


def test_cli_passes_good_notebook(project):
    r = _nbdev_test(project, "nbs/good.ipynb")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


@pytest.mark.parametrize("name", list(BAD))
def test_cli_fails_bad_notebook(project, name):
    r = _nbdev_test(project, f"nbs/bad_{name}.ipynb")
    assert r.returncode != 0, f"nbdev-test passed a notebook with a {name} error:\n{r.stdout}{r.stderr}"
    assert "Success" not in r.stdout
    expected = {"syntax": "SyntaxError", "assert": "deliberately failing assert", "exception": "deliberately raised"}
    assert expected[name] in r.stdout + r.stderr


def test_cli_fails_folder_with_one_bad_notebook(project):
    "Running the whole folder (what CI does) fails if any one notebook fails."
    r = _nbdev_test(project, "nbs", "--n-workers", "1")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "usage:" not in r.stderr and "deliberately failing assert" in r.stdout + r.stderr


def test_cli_slow_flag_runs_flagged_cells(project):
    "`--flags slow` runs the slow cell, whose assert fails: proves flagged cells are skipped, not dropped."
    r = _nbdev_test(project, "nbs/good.ipynb", "--flags", "slow")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "slow cells are skipped by default" in r.stdout + r.stderr


def test_test_nb_api(project):
    "The API our pytest runner uses: (ok, secs) with ok False for each bad notebook."
    flags = get_config(project).tst_flags
    kw = dict(skip_flags=flags.split() if isinstance(flags, str) else list(flags), basepath=project, showerr=False)
    assert "slow" in kw["skip_flags"]
    ok, _ = run_notebook(project / "nbs" / "good.ipynb", **kw)
    assert ok
    for name in BAD:
        ok, _ = run_notebook(project / "nbs" / f"bad_{name}.ipynb", **kw)
        assert not ok, f"test_nb passed a notebook with a {name} error"
    ok, _ = run_notebook(project / "nbs" / "good.ipynb", force_flags=["slow"], **kw)
    assert not ok, "with force_flags=['slow'] the failing slow cell must run"
