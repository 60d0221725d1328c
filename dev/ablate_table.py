"""Collect dev/ablate.sh runs into a table: both bpb views and tok/s, as markdown and as JSON for the course plot.

Usage: python dev/ablate_table.py [--dir /tmp/ablate] [--json dev/ablation_16.json] NAME ...  (default: every run)
"""

import argparse
import json
from pathlib import Path


def collect(root: Path, names: list[str]) -> list[dict]:
    "One row per finished run: name, flags, bpb over whole documents and over document starts, tok/s."
    rows = []
    for d in sorted(root.iterdir()) if not names else [root / n for n in names]:
        res = next(d.glob("checkpoints/base/*/train_result.json"), None)
        if res is None:
            continue
        r = json.loads(res.read_text())
        log = (d / "train.log").read_text().splitlines()
        rows.append(dict(name=d.name, whole=r["final_val_bpb"], starts=r["final_val_bpb_starts"],
                         tok_per_s=r["tok_per_s"], command=next((l for l in log if l.startswith("model:")), "")))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/ablate")
    ap.add_argument("--json", default="")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    rows = collect(Path(a.dir), a.names)
    print("| run | whole documents | document starts | tok/s |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['whole']:.4f} | {r['starts']:.4f} | {r['tok_per_s']:,.0f} |")
    if a.json:
        Path(a.json).write_text(json.dumps([{k: r[k] for k in ("name", "whole", "starts")} for r in rows], indent=1) + "\n")


if __name__ == "__main__":
    main()
