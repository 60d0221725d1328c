"""Run notebooks top to bottom in a fresh kernel and commit the outputs that teach (plots, small tables, short prints).

The docs site shows the outputs stored in the notebooks (Quarto does not execute them), so a plot is on the site only
if it was committed. This script executes each notebook with nbdev's own test runner (`nbdev.test.test_nb`, the same
cells `nbdev-test` runs: cells flagged slow/gpu/dist are skipped unless named in --flags), in a fresh process per
notebook (no hidden state from another notebook), with NANOLIT_BASE_DIR pointed at a throwaway directory; then it
keeps what teaches and drops what doesn't:

- kept: images (PNG/SVG), HTML tables, text results and prints up to --max-lines lines;
- trimmed: longer text to its first and last lines, with a "[... N lines trimmed ...]" marker;
- dropped: stderr (warnings, progress bars), ipywidgets state (live widgets can't render on a static page).

Finally `nbdev-clean` normalises the metadata. Usage:

    python dev/execute_nbs.py nbs/04_model.ipynb nbs/05_optim.ipynb     # the named notebooks
    python dev/execute_nbs.py --all                                      # every nbs/*.ipynb, in numeric order
    python dev/execute_nbs.py --check nbs/*.ipynb   # run each in a fresh process, write nothing (the cold-run check)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DROP_MIME = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


def _trim(lines: list[str], max_lines: int) -> list[str]:
    text = "".join(lines).splitlines(keepends=True)
    if len(text) <= max_lines: return text
    head, tail = text[: max_lines - 3], text[-2:]
    return head + [f"[... {len(text) - len(head) - len(tail)} lines trimmed ...]\n"] + tail


def keep_teaching_outputs(nb: dict, max_lines: int = 30) -> dict:
    "Filter every code cell's outputs of the notebook dict `nb` (nbformat 4) as the module docstring says; returns nb."
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code": continue
        outs = []
        for o in cell.get("outputs", []):
            kind = o.get("output_type")
            if kind == "stream":
                if o.get("name") == "stderr": continue
                o["text"] = _trim(o["text"] if isinstance(o["text"], list) else [o["text"]], max_lines)
            elif kind in ("display_data", "execute_result"):
                data = {k: v for k, v in o.get("data", {}).items() if k not in DROP_MIME}
                if not data: continue
                if "text/plain" in data and len(data) == 1:
                    v = data["text/plain"]
                    data["text/plain"] = _trim(v if isinstance(v, list) else [v], max_lines)
                o["data"] = data
            elif kind == "error":
                raise RuntimeError(f"a cell raised {o.get('ename')}: {o.get('evalue')}; fix it before committing outputs")
            outs.append(o)
        # merge consecutive stdout streams (prints in a loop arrive as many pieces)
        merged = []
        for o in outs:
            if merged and o.get("output_type") == "stream" and merged[-1].get("output_type") == "stream" and merged[-1]["name"] == o["name"]:
                merged[-1]["text"] = _trim(merged[-1]["text"] + o["text"], max_lines)
            else: merged.append(o)
        cell["outputs"] = merged
    return nb


def _run_one(nb_path: Path, flags: list[str], save: bool) -> tuple[bool, float]:
    "Run one notebook in this (fresh) process; with `save`, write its outputs back."
    from execnb import shell
    from nbdev.config import get_config
    from nbdev.test import test_nb

    init = shell.CaptureShell.__init__
    if not getattr(init, "png100", False):  # execnb defaults to 'retina' (200 dpi): store figures at 100 dpi
        def png_init(self, *a, mpl_format="png", **kw): init(self, *a, mpl_format=mpl_format, **kw)
        png_init.png100 = True
        shell.CaptureShell.__init__ = png_init
    cfg = get_config(ROOT)
    skip = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)
    return test_nb(nb_path, skip_flags=skip, force_flags=flags, basepath=ROOT, showerr=True, save=save)


def run(nb_path: Path, flags: list[str], save: bool, max_lines: int) -> tuple[bool, float]:
    "Execute `nb_path` in a fresh Python process (fresh kernel, fresh module state). Returns (ok, seconds)."
    with tempfile.TemporaryDirectory(prefix="nanolit_nb_") as base:
        env = dict(os.environ, NANOLIT_BASE_DIR=base, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                   MPLBACKEND="module://matplotlib_inline.backend_inline")
        code = (f"import sys, json; sys.path.insert(0, {str(ROOT / 'dev')!r}); import execute_nbs as e; from pathlib import Path; "
                f"ok, s = e._run_one(Path({str(nb_path)!r}), {flags!r}, {save!r}); print(json.dumps([ok, s])); sys.exit(0 if ok else 1)")
        p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
            return False, float("nan")
        ok, secs = json.loads(p.stdout.strip().splitlines()[-1])
    if save:
        nb = json.loads(nb_path.read_text())
        nb_path.write_text(json.dumps(keep_teaching_outputs(nb, max_lines), indent=1, ensure_ascii=False) + "\n")
        subprocess.run([str(Path(sys.executable).parent / "nbdev-clean"), "--fname", str(nb_path)], cwd=ROOT, check=True)
    return ok, secs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="every nbs/*.ipynb in numeric order")
    ap.add_argument("--check", action="store_true", help="run only; write nothing back")
    ap.add_argument("--flags", default="", help="space-separated flags to run too (e.g. 'slow')")
    ap.add_argument("--max-lines", type=int, default=30, help="longest text output kept untrimmed")
    a = ap.parse_args(argv)
    nbs = sorted((ROOT / "nbs").glob("[0-9i]*.ipynb")) if a.all else [p.resolve() for p in a.notebooks]
    if not nbs: ap.error("name notebooks or pass --all")
    failed = []
    for nb in nbs:
        ok, secs = run(nb, a.flags.split(), not a.check, a.max_lines)
        print(f"{'ok  ' if ok else 'FAIL'} {nb.name}  {secs:.1f} s", flush=True)
        if not ok: failed.append(nb.name)
    if failed: sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__": main()
