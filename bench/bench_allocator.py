"""What `tune_cpu_allocator` (00_core: glibc keeps freed blocks up to 32 MiB in its heap) buys the cpu.sh pretraining
step, and what it does to Canon B's cost: fresh processes alternated with the tuning on and off (it cannot be undone
inside a process). Each process builds today's model and the Canon B one (depth 4, B 16 x T 256, vocab 8192, Muon +
AdamW as `nanolit.train` builds them), warms each up for 2 steps, then alternates K steps between them; the medians
over all processes of a setting are kept, and the per-pair ratio of Canon B's step to today's.
Usage: python bench/bench_allocator.py [--rounds 3] [--steps 8]   (OMP_NUM_THREADS sets the threads)"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time, torch
from dataclasses import replace
from nanolit.core import tune_cpu_allocator
from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
tuned = sys.argv[2] == "1" and tune_cpu_allocator()
base = GPTConfig.from_depth(4, vocab_size=8192, sequence_len=256, head_dim=64)
g = torch.Generator().manual_seed(1)
x, y = torch.randint(0, 8192, (16, 256), generator=g), torch.randint(0, 8192, (16, 256), generator=g)
runs = {}
for name, canon in (("today", ""), ("canon_B", "B")):
    torch.manual_seed(0)
    m = build_model(replace(base, canon=canon), "cpu")
    runs[name] = (m, build_optimizer(m.param_groups(), model_dim=base.n_embd))
ts = {n: [] for n in runs}
for i in range(2 + int(sys.argv[1])):
    for name in (list(runs) if i % 2 else list(runs)[::-1]):
        m, opt = runs[name]
        t0 = time.perf_counter()
        m(x, y).backward(); opt.step(); m.zero_grad(set_to_none=True)
        if i >= 2: ts[name].append(time.perf_counter() - t0)
print(json.dumps(dict(tuned=tuned, **ts)))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    ts = {s: dict(today=[], canon_B=[]) for s in ("default", "tuned")}
    for r in range(a.rounds):
        for setting in (("default", "tuned") if r % 2 == 0 else ("tuned", "default")):
            out = subprocess.run([sys.executable, "-c", CHILD, str(a.steps), str(int(setting == "tuned"))],
                                 capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            assert res["tuned"] == (setting == "tuned"), f"tune_cpu_allocator did not take here: {res['tuned']}"
            for n in ("today", "canon_B"):
                ts[setting][n] += res[n]
            print(f"round {r} {setting:8s} today {statistics.median(res['today']) * 1e3:.0f} ms, "
                  f"canon_B {statistics.median(res['canon_B']) * 1e3:.0f} ms", flush=True)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
          f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')}")
    ref = statistics.median(ts["default"]["today"])
    print(f"{'allocator':10s} {'model':8s} {'ms/step':>8s} {'tok/s':>7s} {'vs default today':>17s} {'Canon B tok/s vs today (paired)':>32s}")
    for s, d in ts.items():
        pair = statistics.median(b / t for t, b in zip(d["today"], d["canon_B"]))
        for n, t in d.items():
            m = statistics.median(t)
            extra = f"{1 / pair:32.3f}x" if n == "canon_B" else ""
            print(f"{s:10s} {n:8s} {m * 1e3:8.0f} {16 * 256 / m:7,.0f} {ref / m:16.3f}x {extra}")


if __name__ == "__main__":
    main()
