"""Every stage is a console command declared in pyproject.toml: each entry point resolves, and the installed
command answers `--help` with its options (the same `main` as `python -m nanolit.<module>`)."""

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_stage_has_a_command():
    stages = {"data", "tokenizer", "train", "eval", "sft", "rl", "report", "chat"}
    assert {name.removeprefix("nanolit-") for name in SCRIPTS} == stages


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_console_script(name):
    mod, attr = SCRIPTS[name].split(":")
    assert callable(getattr(importlib.import_module(mod), attr)), f"{SCRIPTS[name]} is not callable"
    exe = Path(sys.executable).parent / name
    assert exe.exists(), f"{exe} missing: reinstall with `pip install -e .` (runs/setup.sh does)"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage:" in r.stdout, (name, r.stdout[-2000:], r.stderr[-2000:])
