"""Training throughput on this machine: tokens/s and MFU of one optimizer step of the GPT at a given depth,
against a plain torch.optim.AdamW step on the same model (the reference, measured in the same run).
Usage: python bench/bench_train_step.py [--depth 4] [--T 256] [--B 16] [--vocab 8192]"""
import argparse
import time

import torch

from nanolit.core import get_peak_flops
from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer


def run(model, opt, x, y, steps):
    for i in range(steps + 1):
        if i == 1: t0 = time.perf_counter()   # first step is warm-up
        loss = model(x, y); loss.backward(); opt.step(); model.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--depth", type=int, default=4); ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--B", type=int, default=16); ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    cfg = GPTConfig.from_depth(a.depth, vocab_size=a.vocab, sequence_len=a.T, head_dim=64)
    model = build_model(cfg, "cpu")
    x = torch.randint(0, a.vocab, (a.B, a.T)); y = torch.randint(0, a.vocab, (a.B, a.T))
    ours = run(model, build_optimizer(model.param_groups(), model_dim=cfg.n_embd), x, y, a.steps)
    ref = run(model, torch.optim.AdamW(model.parameters(), lr=1e-3), x, y, a.steps)
    tok = a.B * a.T
    fpt = model.estimate_flops()
    peak = get_peak_flops("cpu")
    print(f"depth {a.depth}: {model.num_params():,} params, {fpt/1e6:.1f} MFLOPs/token, B={a.B} T={a.T}, "
          f"{torch.get_num_threads()} threads, peak {peak/1e9:.0f} GFLOP/s (estimated)")
    for name, t in (("MuonAdamW step", ours), ("torch AdamW step", ref)):
        print(f"{name:17s} {t*1e3:8.1f} ms/step  {tok/t:9,.0f} tok/s  MFU {100*fpt*tok/t/peak:5.2f}%  "
              f"{t/ref:5.2f}x the AdamW reference")


if __name__ == "__main__":
    main()
