"""Shape figures of the package and notebooks: longest functions, loop length, import cycles, lint, notebook bytes.

Run `python dev/shape.py` from the repository root; the issue-15 before/after table in `dev/LOG.md` comes from it.
"""
import ast, base64, json, pathlib, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "nanolit"


def modules():
    "Map dotted module name -> path for every generated module (not `_modidx`)."
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if p.name in ("_modidx.py", "__init__.py"): continue
        out[".".join(p.relative_to(ROOT).with_suffix("").parts)] = p
    return out


def functions(tree):
    "Yield (qualified name, number of lines) for every function in `tree`."
    def walk(node, prefix):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + ch.name, ch.end_lineno - ch.lineno + 1
                yield from walk(ch, prefix + ch.name + ".")
            elif isinstance(ch, ast.ClassDef): yield from walk(ch, prefix + ch.name + ".")
    yield from walk(tree, "")


def imports(mod, tree, names):
    "Package modules that `mod` imports (module level or inside functions)."
    got = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = mod.split(".")[: -node.level]
                base = ".".join(pkg + ([base] if base else []))
            for cand in [base] + [f"{base}.{a.name}" for a in node.names]:
                if cand in names: got.add(cand)
        elif isinstance(node, ast.Import):
            got |= {a.name for a in node.names if a.name in names}
    got.discard(mod)
    return got


def cycles(graph):
    "Strongly connected components of size > 1 (Tarjan)."
    idx, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        idx[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in idx: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in graph:
        if v not in idx: visit(v)
    return out


def main():
    mods = modules()
    funcs, graph, lines = [], {}, []
    for name, p in mods.items():
        src = p.read_text(); tree = ast.parse(src)
        funcs += [(n, f"{name}.{f}") for f, n in functions(tree)]
        graph[name] = imports(name, tree, set(mods))
        lines += src.splitlines()
    funcs.sort(reverse=True)
    print("longest functions:", ", ".join(f"{q} {n}" for n, q in funcs[:5]))
    for stage in ("nanolit.train.train", "nanolit.sft.sft", "nanolit.rl.rl"):
        print(f"lines of {stage}:", next((n for n, q in funcs if q == stage), None))
    print("functions over 60 lines:", sum(n > 60 for n, _ in funcs))
    print("import cycles:", cycles(graph) or "none")
    print(f"lines over 120 columns: {sum(len(x) > 120 for x in lines)} of {len(lines)}")
    iso = [str(ROOT / ".venv/bin/ruff"), "check", "--isolated", "--select", "E,F,W", "--line-length", "120",
           "--exclude", "_modidx.py", "--statistics", str(PKG)]
    r = subprocess.run(iso, capture_output=True, text=True, cwd=ROOT)
    print("ruff E,F,W at 120 columns (isolated):", r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "clean")
    r = subprocess.run([str(ROOT / ".venv/bin/ruff"), "check", "--statistics", "--output-format", "concise", str(PKG)],
                       capture_output=True, text=True, cwd=ROOT)
    print("ruff (pyproject config):", r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else "clean")
    nb_bytes = img = 0
    for nb in sorted((ROOT / "nbs").glob("*.ipynb")):
        nb_bytes += nb.stat().st_size
        for c in json.loads(nb.read_text())["cells"]:
            for o in c.get("outputs", []):
                d = o.get("data", {}).get("image/png")
                if d: img += len("".join(d))
    print(f"notebook bytes: {nb_bytes:,} (of which PNG base64 {img:,})")


if __name__ == "__main__": main()
