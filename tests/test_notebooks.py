"""Run every notebook in nbs/ as one pytest item, the way `nbdev-test` does (same runner, same skip flags).

Cells flagged with a flag from `[tool.nbdev] tst_flags` (slow, gpu, dist) are skipped unless named in
$NANOLIT_TEST_FLAGS (space separated), like `nbdev-test --flags`.
"""
import os
from pathlib import Path

import pytest
from nbdev.config import get_config
from nbdev.test import test_nb as run_notebook

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_"))


def skip_flags():
    flags = get_config(ROOT).tst_flags
    return flags.split() if isinstance(flags, str) else list(flags)


@pytest.mark.parametrize("nb", NBS, ids=[p.stem for p in NBS])
def test_notebook(nb):
    force = os.environ.get("NANOLIT_TEST_FLAGS", "").split()
    ok, secs = run_notebook(nb, skip_flags=skip_flags(), force_flags=force, basepath=ROOT, showerr=True)
    assert ok, f"{nb.name} failed (traceback above)"
