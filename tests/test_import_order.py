"""Notebook number = import order: a module imports only modules made by lower-numbered notebooks.

`nbs/06a_mesh.ipynb` makes `nanolit.parallel.mesh`, and so on (each notebook's `default_exp`). Reading the
notebooks in order is then reading the package bottom-up, and no import cycle can form. Imports inside
functions count too (a lazy import is still a dependency).
"""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def notebook_of_module(nbs: Path = ROOT / "nbs") -> dict[str, str]:
    "Map each generated module ('nanolit.x') to the stem of the notebook that exports it ('05_optim')."
    out = {}
    for nb in sorted(nbs.glob("*.ipynb")):
        for c in json.loads(nb.read_text())["cells"]:
            m = re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(c["source"]), re.M)
            if m:
                out["nanolit." + m.group(1)] = nb.stem
                break
    return out


def imported_modules(mod: str, src: str, known: set[str]) -> set[str]:
    "The modules of `known` that module `mod` (source `src`) imports, at module level or inside functions."
    got = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y / from ..core import z
                parts = mod.split(".")[: -node.level]
                base = ".".join(parts + ([base] if base else []))
            got |= {c for c in [base] + [f"{base}.{a.name}" for a in node.names] if c in known}
        elif isinstance(node, ast.Import):
            got |= {a.name for a in node.names if a.name in known}
    return got - {mod}


def order_violations(sources: dict[str, str], order: dict[str, str]) -> list[str]:
    "One line per import of a module whose notebook sorts after the importer's notebook."
    return [
        f"{mod} ({order[mod]}) imports {dep} ({order[dep]})"
        for mod, src in sorted(sources.items())
        for dep in sorted(imported_modules(mod, src, set(order)))
        if order[dep] > order[mod]
    ]


def package_sources() -> dict[str, str]:
    "Source text of every module a notebook exports."
    order = notebook_of_module()
    return {m: (ROOT / Path(*m.split("."))).with_suffix(".py").read_text() for m in order}


def test_every_module_has_a_notebook():
    order = notebook_of_module()
    made = {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "nanolit").rglob("*.py")}
    made -= {"nanolit.__init__", "nanolit._modidx", "nanolit.parallel.__init__"}
    assert made == set(order), f"modules without a notebook: {sorted(made - set(order))}"


def test_imports_follow_notebook_order():
    bad = order_violations(package_sources(), notebook_of_module())
    assert not bad, "import of a later notebook's module:\n" + "\n".join(bad)


def private_imports(mod: str, src: str, known: set[str]) -> list[str]:
    "One line per `_private` name that module `mod` imports from another package module."
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(mod.split(".")[: -node.level] + ([base] if base else []))
            if base in known and base != mod:
                out += [f"{mod} imports {base}.{a.name}" for a in node.names if a.name.startswith("_")]
    return out


def test_no_private_names_across_modules():
    "A name another module needs is public (in `__all__`, on the docs site); `_names` stay in their module."
    order = notebook_of_module()
    bad = [line for m, src in package_sources().items() for line in private_imports(m, src, set(order))]
    assert not bad, "\n".join(bad)
    assert private_imports("nanolit.rl", "from .sft import chat_eval, _save_curves\n", {"nanolit.sft"}) == [
        "nanolit.rl imports nanolit.sft._save_curves"
    ]


def test_order_check_fails_on_violations():
    "The check is not vacuous: a top-level, a lazy and a relative import of a later module are each caught."
    order = {"nanolit.core": "00_core", "nanolit.eval": "09_eval", "nanolit.tasks": "10_tasks"}
    ok = {"nanolit.tasks": "from .eval import bpb\nfrom nanolit.core import x\n", "nanolit.eval": "import math\n"}
    assert order_violations(ok, order) == []
    for bad_src in ("from nanolit.tasks import load_model\n", "def f():\n    from .tasks import load_model\n",
                    "import nanolit.tasks\n", "from . import tasks\n"):
        got = order_violations({**ok, "nanolit.eval": bad_src}, order)
        assert got == ["nanolit.eval (09_eval) imports nanolit.tasks (10_tasks)"], (bad_src, got)
    # and the real package is checked, not an empty map
    assert len(package_sources()) >= 20
