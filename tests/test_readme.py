"""The README is the index notebook's markdown (kept in step by dev/readme.py) and shows the two commands."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_matches_index():
    spec = importlib.util.spec_from_file_location("readme", ROOT / "dev" / "readme.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    assert (ROOT / "README.md").read_text() == mod.render_index(), "run: python dev/readme.py"


def test_readme_shows_the_two_commands_and_they_exist():
    text = (ROOT / "README.md").read_text()
    for cmd in ("bash runs/cpu.sh", "bash runs/test.sh"):
        assert cmd in text
        assert (ROOT / cmd.split()[1]).exists()
    assert "bash runs/test.sh" in (ROOT / ".ci" / "run").read_text()
