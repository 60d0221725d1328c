"""Every notebook cell that draws a figure keeps its image, stored at about 100 dpi.

A commit once wiped every stored output of four notebooks and nothing noticed: the figures are what a reader of the
site sees, so a drawing cell without its PNG fails here. Exported cells (definitions) are not drawing cells.
"""

import base64
import io
import json
import re
from pathlib import Path

import pytest

NBS = Path(__file__).resolve().parent.parent / "nbs"
DRAWS = re.compile(r"\bplt\.(show|subplots|figure|plot|imshow)\(|\bfig(ure)?\.savefig\(|\bdisplay\(Image\(")
MAX_DPI = 110  # figures are stored at ~100 dpi (execnb's default 'retina' stored 200)


def drawing_cells(nb: dict):
    "Yield (cell index, cell) for each non-exported code cell whose source draws a figure."
    for i, c in enumerate(nb["cells"]):
        src = "".join(c["source"])
        if c["cell_type"] == "code" and DRAWS.search(src) and not re.search(r"^#\|\s*export", src, re.M):
            yield i, c


def figure_problems(nb: dict) -> list[str]:
    "One line per drawing cell without a stored PNG, and per PNG stored above MAX_DPI."
    from PIL import Image

    bad = []
    for i, c in drawing_cells(nb):
        pngs = [o["data"]["image/png"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        if not pngs:
            bad.append(f"cell {i} draws a figure but has no stored image")
        for p in pngs:
            dpi = Image.open(io.BytesIO(base64.b64decode("".join(p)))).info.get("dpi", (100, 100))[0]
            if dpi > MAX_DPI:
                bad.append(f"cell {i} stores a {dpi:.0f} dpi image (at most {MAX_DPI})")
    return bad


@pytest.mark.parametrize("nb_path", sorted(NBS.glob("*.ipynb")), ids=lambda p: p.name)
def test_figures_stored(nb_path):
    bad = figure_problems(json.loads(nb_path.read_text()))
    assert not bad, f"{nb_path.name}: " + "; ".join(bad) + " (re-run: python dev/execute_nbs.py nbs/" + nb_path.name + ")"


def _png(dpi):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, "PNG", dpi=(dpi, dpi))
    return base64.b64encode(buf.getvalue()).decode()


def _nb(outputs, src="fig, ax = plt.subplots()\nplt.show()"):
    return {"cells": [{"cell_type": "code", "source": [src], "outputs": outputs}]}


def test_figure_check_fails_on_violations():
    "The check is not vacuous: a wiped figure, a 200 dpi figure fail; a 100 dpi one and an exported plotter pass."

    def img(dpi):
        return [{"output_type": "display_data", "data": {"image/png": _png(dpi)}}]

    assert figure_problems(_nb([])) == ["cell 0 draws a figure but has no stored image"]
    assert "200 dpi" in figure_problems(_nb(img(200)))[0]
    assert figure_problems(_nb(img(100))) == []
    assert figure_problems(_nb([], "#| export\ndef plot(x):\n    fig, ax = plt.subplots()")) == []
    assert sum(1 for nb in NBS.glob("*.ipynb") for _ in drawing_cells(json.loads(nb.read_text()))) >= 15
