"""Write README.md from nbs/index.ipynb (nbdev-readme needs Quarto, which can't be installed here).
The README is the index notebook's markdown cells, in order. tests/test_readme.py checks they agree."""
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render_index() -> str:
    nb = json.loads((ROOT / "nbs" / "index.ipynb").read_text())
    cells = ["".join(c["source"]).strip() for c in nb["cells"] if c["cell_type"] == "markdown"]
    return "\n\n".join(cells) + "\n"


if __name__ == "__main__":
    (ROOT / "README.md").write_text(render_index())
    print("README.md written from nbs/index.ipynb")
