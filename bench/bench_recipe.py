"""What each issue-16 recipe piece costs in training throughput on this machine: ms per optimizer step of the
cpu.sh model (depth 4, T 256, B 16) with one piece switched on, against today's step (the model issue 16 started
from: S windows of a quarter of the row, no Canon layers), measured in the same run,
interleaved (rounds of every variant, the order rotated each round, median per variant) so load drifts hit all
alike; the last column is the median over rounds of today's step / the variant's step in the same round, the figure
least moved by this shared machine's drifts.
Usage: python bench/bench_recipe.py [--depth 4] [--rounds 5] [--variants canon_AC,smear]"""
import argparse
import statistics
import time
from dataclasses import replace

import torch

from nanolit.core import tune_cpu_allocator
from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer

VARIANTS = {  # name -> (model fields, optimizer keywords)
    "today": ({}, {}),
    "smear": (dict(smear=True), {}),
    "backout": (dict(backout=True), {}),
    "polar_express": ({}, dict(muon_method="polar_express")),
    "normuon": ({}, dict(normuon=True)),
    "cautious_wd": ({}, dict(weight_decay=0.1, cautious_wd=True)),
    "plain_wd": ({}, dict(weight_decay=0.1)),
    "qk_gain": (dict(qk_gain=True), {}),
    "ve_gate_input": (dict(ve_gate_input=True), {}),
    "muon_stacked": ({}, dict(stacked=True)),
    "canon_A": (dict(canon="A"), {}),
    "canon_B": (dict(canon="B"), {}),
    "canon_D": (dict(canon="D"), {}),
    "canon_AC": (dict(canon="AC"), {}),
    "canon_BD": (dict(canon="BD"), {}),
    "canon_ABCD": (dict(canon="ABCD"), {}),
    "default": (dict(canon="B", short_window=2), {}),  # the training default since 11's "One default"
    "all": (dict(smear=True, backout=True, qk_gain=True, ve_gate_input=True),
            dict(muon_method="polar_express", normuon=True, weight_decay=0.1, cautious_wd=True)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--depth", type=int, default=4); ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--B", type=int, default=16); ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=5); ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--variants", default="", help="comma-separated names to run (today always runs); default all")
    ap.add_argument("--default-allocator", action="store_true", help="keep glibc's malloc defaults (training tunes them)")
    a = ap.parse_args()
    tuned = not a.default_allocator and tune_cpu_allocator()  # as `dist_init` does for a CPU run
    chosen = {"today", *a.variants.split(",")} if a.variants else set(VARIANTS)
    if unknown := chosen - set(VARIANTS):
        ap.error(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    base = GPTConfig.from_depth(a.depth, vocab_size=a.vocab, sequence_len=a.T, head_dim=64)
    x = torch.randint(0, a.vocab, (a.B, a.T)); y = torch.randint(0, a.vocab, (a.B, a.T))
    runs = {}
    for name, (mk, ok) in VARIANTS.items():
        if name not in chosen:
            continue
        torch.manual_seed(0)
        m = build_model(replace(base, **mk), "cpu")
        runs[name] = (m, build_optimizer(m.param_groups(), model_dim=base.n_embd, **ok))
    times = {n: [] for n in runs}
    names = list(runs)
    for r in range(a.rounds + 1):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotated: no variant always follows another
            m, opt = runs[name]
            t0 = time.perf_counter()
            for _ in range(a.steps):
                m(x, y).backward(); opt.step(); m.zero_grad(set_to_none=True)
            if r:  # round 0 warms up
                times[name].append((time.perf_counter() - t0) / a.steps)
    ref = statistics.median(times["today"])
    print(f"depth {a.depth}, B={a.B}, T={a.T}, {torch.get_num_threads()} threads, {a.rounds} rounds of {a.steps} steps,"
          f" allocator {'tuned' if tuned else 'default'}")
    for name, ts in times.items():
        t = statistics.median(ts)
        paired = statistics.median(r / v for r, v in zip(times["today"], ts))
        print(f"{name:14s} {t * 1e3:8.1f} ms/step  {a.B * a.T / t:8,.0f} tok/s  {ref / t:5.3f}x today's throughput"
              f"  (paired by round: {paired:5.3f}x)")


if __name__ == "__main__":
    main()
