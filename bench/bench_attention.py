"""Attention speed: nanolit's `attention` (SDPA) against the masked-matmul version and the naive loop, same inputs,
same run. Prints each as a ratio to the fast path. Usage: python bench/bench_attention.py [--T 256] [--window 64]"""

import argparse
import time

import torch

from nanolit.attention import attention, attention_matmul, attention_naive


def timeit(fn, *args, reps=5, **kw):
    fn(*args, **kw)  # warm-up
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args, **kw)
    return (time.perf_counter() - t0) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--Hkv", type=int, default=2)
    ap.add_argument("--D", type=int, default=64)
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--naive", action="store_true", help="also time the Python loop (slow)")
    a = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(a.B, a.T, a.H, a.D, generator=g)
    k, v = (torch.randn(a.B, a.T, a.Hkv, a.D, generator=g) for _ in range(2))
    w = a.window or None
    fast = timeit(attention, q, k, v, window=w)
    rows = [("attention (SDPA)", fast), ("masked matmul", timeit(attention_matmul, q, k, v, window=w))]
    if a.naive:
        rows.append(("naive loop", timeit(attention_naive, q, k, v, window=w, reps=1)))
    print(f"B={a.B} T={a.T} H={a.H} Hkv={a.Hkv} D={a.D} window={w} threads={torch.get_num_threads()}")
    for name, t in rows:
        print(f"{name:18s} {t * 1e3:9.2f} ms   {t / fast:6.2f}x the fast path")


if __name__ == "__main__":
    main()
