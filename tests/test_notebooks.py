"""Run every notebook in nbs/ as one pytest item, the way `nbdev-test` does (same runner, same skip flags), each in a
fresh Python process with its own throwaway NANOLIT_BASE_DIR: a cold run in a fresh kernel, so no notebook can lean on
state (imports, environment variables, files) that another one left behind.

Cells flagged with a flag from `[tool.nbdev] tst_flags` (slow, gpu, dist) are skipped unless named in
$NANOLIT_TEST_FLAGS (space separated), like `nbdev-test --flags`. The runner is `dev/execute_nbs.py --check`.
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import execute_nbs  # noqa: E402

NBS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))


@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook(nb):
    force = os.environ.get("NANOLIT_TEST_FLAGS", "").split()
    ok, secs = execute_nbs.run(nb, force, save=False, max_lines=30)
    assert ok, f"{nb.name} failed in a fresh process (traceback above)"
