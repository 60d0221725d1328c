"""Every exported public symbol is documented: each function and class in a module's `__all__` has a docstring (at
least 40 characters: what it takes and returns, not just a name), and every public method a class defines has one too
(inherited docstrings count, as `inspect.getdoc` reads them). The site renders these with `show_doc`
(tests/test_docs.py checks each symbol has its entry there)."""
import importlib
import inspect
import pkgutil

import pytest

import nanolit

MODULES = sorted(m.name for m in pkgutil.walk_packages(nanolit.__path__, "nanolit.") if not m.name.endswith("_modidx"))


def _undocumented(modname):
    mod = importlib.import_module(modname)
    bad = []
    for name in getattr(mod, "__all__", []):
        obj = getattr(mod, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or getattr(obj, "__module__", "") != modname: continue
        if len(inspect.getdoc(obj) or "") < 40: bad.append(name)
        if inspect.isclass(obj):
            for mname, m in vars(obj).items():
                if mname.startswith("_"): continue
                f = m.__func__ if isinstance(m, (classmethod, staticmethod)) else m.fget if isinstance(m, property) else m
                if inspect.isfunction(f) and len(inspect.getdoc(getattr(obj, mname)) or "") < 15: bad.append(f"{name}.{mname}")
    return bad


@pytest.mark.parametrize("modname", MODULES)
def test_public_symbols_have_docstrings(modname):
    assert _undocumented(modname) == []


def test_the_check_can_fail():
    import types, sys
    mod = types.ModuleType("nanolit._doc_probe"); mod.__all__ = ["f", "C"]
    exec("def f(x): return x\nclass C:\n    'A class with a long enough docstring to pass the check.'\n    def g(self): pass", mod.__dict__)
    mod.f.__module__ = mod.C.__module__ = "nanolit._doc_probe"
    sys.modules["nanolit._doc_probe"] = mod
    try: assert _undocumented("nanolit._doc_probe") == ["f", "C.g"]
    finally: del sys.modules["nanolit._doc_probe"]
