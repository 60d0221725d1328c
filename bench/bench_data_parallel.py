"""Data-parallel rungs of 06b on this CPU: communication volume per optimizer step per rank, measured, against the
theoretical value, and tokens/s at world 1, 2 and 4 for the same global batch (forked gloo ranks, one thread each).

Measured volume: bytes this rank's process handed to write() calls during the step (`wchar` in /proc/self/io; gloo's
TCP transport sends with writev), so per rank and untouched by other processes on the machine.
Theory (W ranks, |g| gradient bytes, |p| parameter bytes, ZeRO-1 buffers padded to multiples of W):
  ring all-reduce (naive, bucketed, DDP): 2 (W-1)/W |g|
  ZeRO-1: reduce-scatter (W-1)/W |g| + all-gather (W-1)/W |p|                (= one all-reduce)
  ZeRO-2 (overlapped): the same two collectives, per bucket (Muon: W matrices of one shape a bucket)
  FSDP2 (reshard after forward): all-gather in forward and in backward + reduce-scatter = 3 (W-1)/W |p|
The reference for tok/s is world 1 running the same loop without communication, measured in the same run.
Usage: python bench/bench_data_parallel.py [--depth 2] [--T 64] [--B 16] [--vocab 1024] [--steps 4]"""
import argparse
import os
import time
import warnings
from contextlib import nullcontext

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
import torch.distributed as dist

from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.data_parallel import (ZERO2_BUCKET_MB, GradBucketer, allreduce_gradients, apply_fsdp,
                                            bucket_indices, shard_layout, shard_optimizer, wrap_ddp)
from nanolit.parallel.mesh import run_distributed

warnings.filterwarnings("ignore")
RUNGS = ("naive", "bucket", "ddp", "zero1", "zero2", "fsdp2")


def wchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("wchar")).split()[1])


def theory(rung, W, model, opt_groups):
    g = sum(p.numel() * p.element_size() for p in model.parameters())
    f = (W - 1) / W
    if rung in ("naive", "bucket", "ddp"): return 2 * f * g
    if rung in ("zero1", "zero2"):  # padded flat buffers (zero2: one per bucket), both collectives
        padded = 0
        for grp in opt_groups:
            ps = grp["params"]
            mb = ZERO2_BUCKET_MB if rung == "zero2" else None
            for idx in bucket_indices([tuple(p.shape) for p in ps], ps[0].element_size(), W, grp["kind"] == "muon", mb):
                padded += W * shard_layout([ps[i].numel() for i in idx], W, whole=grp["kind"] == "muon")[2] * \
                    ps[0].element_size()
        return 2 * f * padded
    if rung == "fsdp2": return 3 * f * g


def bench(rung, cfg, B, accum, steps, bucket_mb):
    "Runs on every rank (or alone). Returns (seconds per step, bytes written per step, theoretical bytes per step)."
    W = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if W > 1 else 0
    torch.manual_seed(0)
    model = build_model(cfg, "cpu")
    groups = build_optimizer(model.param_groups(), model_dim=cfg.n_embd).param_groups
    th = theory(rung, W, model, groups) if W > 1 else 0.0
    bucketer = None
    if W > 1 and rung == "ddp": model = wrap_ddp(model, bucket_mb=bucket_mb)
    if W > 1 and rung == "fsdp2": model = apply_fsdp(model)
    inner = model.module if rung == "ddp" and W > 1 else model
    if rung == "fsdp2": opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else: opt = build_optimizer(inner.param_groups(), model_dim=cfg.n_embd)
    if rung == "zero1": opt = shard_optimizer(opt)
    if rung == "zero2": opt = shard_optimizer(opt, bucket_mb=ZERO2_BUCKET_MB, overlap=True).attach(model)
    if rung == "bucket": bucketer = GradBucketer(model.parameters(), bucket_mb=bucket_mb)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg.vocab_size, (B, cfg.sequence_len + 1), generator=g)
    n = B // W; m = n // accum
    micro = [(data[rank*n + i*m: rank*n + (i+1)*m, :-1], data[rank*n + i*m: rank*n + (i+1)*m, 1:]) for i in range(accum)]
    times, sent = [], []
    for step in range(steps + 1):           # step 0 is warm-up
        if W > 1: dist.barrier()
        t0, w0 = time.perf_counter(), wchar()
        for i, (x, y) in enumerate(micro):
            last = i == accum - 1
            ctx = nullcontext()
            if bucketer is not None and not last: ctx = bucketer.no_sync()
            if rung == "ddp" and W > 1 and not last: ctx = model.no_sync()
            if rung == "zero2" and not last: ctx = opt.no_sync()
            if rung == "fsdp2" and W > 1: model.set_requires_gradient_sync(last)
            with ctx: (model(x, y) / accum).backward()
        if rung == "naive": allreduce_gradients(model.parameters())
        if bucketer is not None: bucketer.finish()
        opt.step(); opt.zero_grad(set_to_none=True)
        w1 = wchar()
        if W > 1: dist.barrier()
        if step > 0: times.append(time.perf_counter() - t0); sent.append(w1 - w0)
    return sum(times) / len(times), sum(sent) / len(sent), th


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=2); ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--B", type=int, default=16); ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--accum", type=int, default=1); ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--worlds", default="2,4"); ap.add_argument("--rungs", default=",".join(RUNGS))
    a = ap.parse_args()
    cfg = GPTConfig.from_depth(a.depth, vocab_size=a.vocab, sequence_len=a.T, head_dim=32)
    nparam = build_model(cfg, "cpu").num_params()
    tok = a.B * a.T
    print(f"depth {a.depth}: {nparam:,} params ({nparam*4/2**20:.2f} MiB fp32), global batch {a.B}x{a.T} = {tok} tokens, "
          f"accum {a.accum}, {os.cpu_count()} CPUs, 1 thread per rank")
    torch.set_num_threads(1)
    t1, _, _ = bench("naive", cfg, a.B, a.accum, a.steps, a.bucket_mb)   # world 1: the reference, no communication
    print(f"{'rung':7s} {'W':>2s} {'ms/step':>9s} {'tok/s':>8s} {'vs W=1':>7s} {'sent MB/rank':>13s} {'theory MB':>10s} {'ratio':>6s}")
    print(f"{'(none)':7s} {1:2d} {t1*1e3:9.1f} {tok/t1:8,.0f} {1.0:7.2f} {0:13.3f} {0:10.3f} {'':>6s}")
    for W in map(int, a.worlds.split(",")):
        for rung in a.rungs.split(","):
            outs = run_distributed(bench, W, rung, cfg, a.B, a.accum, a.steps, a.bucket_mb, timeout=600)
            t = max(o[0] for o in outs); sent = sum(o[1] for o in outs) / W; th = outs[0][2]
            print(f"{rung:7s} {W:2d} {t*1e3:9.1f} {tok/t:8,.0f} {t1/t:7.2f} {sent/1e6:13.3f} {th/1e6:10.3f} {sent/th:6.3f}")


if __name__ == "__main__":
    main()
