"""Edit notebook cells from the shell, so notebooks (the source of truth) change without hand-editing JSON.

  python dev/nbedit.py find NB TEXT                 list cells (index, id, type, first line) containing TEXT
  python dev/nbedit.py show NB I                    print cell I's source
  python dev/nbedit.py replace NB OLD_FILE NEW_FILE replace the one exact occurrence of OLD_FILE's text
  python dev/nbedit.py set NB I FILE                set cell I's source to FILE's text
  python dev/nbedit.py insert NB I FILE [code|markdown]  insert a new cell after cell I (-1: at the top)
  python dev/nbedit.py delete NB I                  delete cell I

FILE may be `-` for standard input. Outputs of edited cells are cleared; the notebook is written in nbdev's format.
"""
import json, sys, uuid
from pathlib import Path


def load(nb): return json.loads(Path(nb).read_text())


def save(nb, d): Path(nb).write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")


def src(c): return "".join(c["source"])


def set_src(c, text):
    lines = text.splitlines(keepends=True)
    if lines and lines[-1].endswith("\n"): lines[-1] = lines[-1][:-1]   # nbdev stores no final newline
    c["source"] = [l for l in lines if l != ""]
    if c["cell_type"] == "code": c["outputs"], c["execution_count"] = [], None


def read(f): return sys.stdin.read() if f == "-" else Path(f).read_text()


def new_cell(kind, text):
    c = {"cell_type": kind, "id": uuid.uuid4().hex[:8], "metadata": {}, "source": []}
    if kind == "code": c.update(execution_count=None, outputs=[])
    set_src(c, text)
    return c


def main(argv):
    cmd, nb, *rest = argv
    d = load(nb)
    cells = d["cells"]
    if cmd == "find":
        for i, c in enumerate(cells):
            if rest[0] in src(c): print(i, c.get("id"), c["cell_type"], src(c).splitlines()[0][:100] if src(c) else "")
        return
    if cmd == "show": print(src(cells[int(rest[0])])); return
    if cmd == "replace":
        old, new = read(rest[0]), read(rest[1])
        hits = [c for c in cells if old in src(c)]
        n = sum(src(c).count(old) for c in hits)
        if n != 1: sys.exit(f"error: the text occurs {n} times in {nb} (must be exactly once)")
        set_src(hits[0], src(hits[0]).replace(old, new))
    elif cmd == "set": set_src(cells[int(rest[0])], read(rest[1]))
    elif cmd == "insert": cells.insert(int(rest[0]) + 1, new_cell(rest[2] if len(rest) > 2 else "code", read(rest[1])))
    elif cmd == "delete": del cells[int(rest[0])]
    else: sys.exit(__doc__)
    save(nb, d)


if __name__ == "__main__": main(sys.argv[1:])
