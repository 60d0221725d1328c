"""Write README.md from nbs/index.ipynb (nbdev-readme needs Quarto, which can't be installed here).
The README is the index notebook's markdown cells, in order. tests/test_readme.py checks they agree."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render_index() -> str:
    nb = json.loads((ROOT / "nbs" / "index.ipynb").read_text())
    cells = ["".join(c["source"]).strip() for c in nb["cells"] if c["cell_type"] == "markdown"]
    md = "\n\n".join(cells) + "\n"
    # links between notebooks are relative to nbs/ (where the site is built); from the repo root they need the prefix
    md = re.sub(r"\]\((?!https?:|/|#|nbs/)([^)]+\.ipynb)\)", r"](nbs/\1)", md)
    # the site links repository files on GitHub; in the clone the README sits beside them, so link them relatively
    return re.sub(r"\]\(https://github\.com/nanolit/nanolit/blob/main/([^)]+)\)", r"](\1)", md)


if __name__ == "__main__":
    (ROOT / "README.md").write_text(render_index())
    print("README.md written from nbs/index.ipynb")
