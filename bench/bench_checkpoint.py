"""Checkpoint throughput on this machine: `save_dcp_checkpoint` / `load_dcp_checkpoint` (torch.distributed.checkpoint,
layout-free, atomic: temp dir, fsync, COMPLETE marker, rename) against a plain `torch.save` / `torch.load` of the
same state (model + optimizer moments) into one file, measured in the same run; also the DCP save and load at world
2 with ZeRO-1 (forked gloo ranks; the AdamW moments are all-gathered into the per-parameter form on save).
MB/s counts the bytes of the tensors saved (model + optimizer state), not of the files. Tok/s at world 1, 2, 4 for
the same global batch is `bench/bench_data_parallel.py`'s job.
Usage: python bench/bench_checkpoint.py [--depth 4] [--repeats 3]"""
import argparse
import io
import os
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch
import torch.distributed as dist

from nanolit.checkpoint import load_dcp_checkpoint, optimizer_state_dict, save_dcp_checkpoint
from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.data_parallel import shard_optimizer
from nanolit.parallel.mesh import run_distributed

warnings.filterwarnings("ignore")


def setup(depth, zero=False):
    torch.manual_seed(0)
    model = build_model(GPTConfig.from_depth(depth, vocab_size=8192, sequence_len=64), "cpu")
    opt = build_optimizer(model.param_groups(), model_dim=model.config.n_embd)
    if zero: opt = shard_optimizer(opt)
    x = torch.randint(0, 8192, (2, 65))
    model(x[:, :-1], x[:, 1:]).backward(); opt.step(); opt.zero_grad()
    return model, opt


def nbytes(model, opt):
    st = optimizer_state_dict(opt, model)
    return sum(t.numel() * t.element_size() for t in list(model.state_dict().values()) + list(st.values()))


def best(fn, repeats):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return min(ts)


def plain(model, opt, d, repeats):
    path = Path(d) / "plain.pt"
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    def save():
        with open(path, "wb") as f: torch.save(state, f); f.flush(); os.fsync(f.fileno())
    return best(save, repeats), best(lambda: torch.load(path, weights_only=False), repeats)


def dcp_times(d, depth, repeats, zero=False):
    model, opt = setup(depth, zero)
    n = nbytes(model, opt)
    step = [0]
    def save():
        step[0] += 1; save_dcp_checkpoint(Path(d) / "dcp", step[0], model, opt, keep_last=1)
    ts = best(save, repeats)
    if dist.is_initialized(): dist.barrier()
    tl = best(lambda: load_dcp_checkpoint(Path(d) / "dcp", model, opt), repeats)
    return n, ts, tl


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--depth", type=int, default=4); ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        model, opt = setup(a.depth)
        n = nbytes(model, opt)
        ps, pl = plain(model, opt, d, a.repeats)
        _, ds, dl = dcp_times(d, a.depth, a.repeats)
        ck2 = Path(d) / "w2"; ck2.mkdir()
        _, zs, zl = run_distributed(dcp_times, 2, str(ck2), a.depth, a.repeats, True, timeout=600)[0]
    mb = n / 2**20
    print(f"state: depth {a.depth}, {sum(p.numel() for p in model.parameters()):,} params, {mb:.1f} MB (model + optimizer)")
    print(f"{'writer':34s} {'save MB/s':>10s} {'load MB/s':>10s} {'save vs plain':>14s} {'load vs plain':>14s}")
    for name, s, l in (("torch.save / torch.load (1 file)", ps, pl), ("DCP, world 1 (atomic dir)", ds, dl),
                       ("DCP, world 2 ZeRO-1 (gather+write)", zs, zl)):
        print(f"{name:34s} {mb/s:10.1f} {mb/l:10.1f} {ps/s:13.2f}x {pl/l:13.2f}x")


if __name__ == "__main__":
    main()
