"""Tensor parallel on CPU (gloo, forked ranks): communication per training step per rank, counted by
`nanolit.parallel.tensor_parallel.count_comm`, against the closed form, and tokens/s at tp = 1, 2, 4, with and
without sequence parallel. Run: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_tensor_parallel.py

Theory (per rank, elements on the wire for ring collectives: all-reduce of n sends 2(W-1)/W n, all-gather producing n
and reduce-scatter consuming n send (W-1)/W n each), with N = B*T tokens, d the width, L layers:
  activations: (4 + 8L) (W-1)/W N d   -- per block f+g for attention and MLP (forward g, backward f: 2 all-reduces
              each), plus the embedding's g and the head's f; SP replaces each all-reduce by an all-gather and a
              reduce-scatter of the same total (with T padded to a multiple of W)
  loss:        3 * 2(W-1)/W N           -- max, sum of exponentials, target logit
  Muon:        (W-1)/W * sum of the sharded matrices' sizes (all-gather of the update direction)
  SP only:     2 * 2(W-1)/W L           -- the per-layer scalars' gradient all-reduce
On a 2-core machine tp > 2 oversubscribes the cores: the tok/s column measures overhead, not speed-up."""
import time
import warnings

import torch
import torch.distributed as dist

from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.mesh import init_mesh, run_distributed
from nanolit.parallel.tensor_parallel import count_comm, parallelize, shard_size, tensor_parallel_optimizer

warnings.filterwarnings("ignore")
CFG = dict(sequence_len=128, vocab_size=1024, n_layer=2, n_head=4, n_kv_head=4, n_embd=128, window_pattern="L")
B, T, STEPS = 4, 128, 3


def _wire(log):
    f = {"all_reduce": lambda i, o, w: 2 * (w - 1) / w * i, "all_gather": lambda i, o, w: (w - 1) / w * o,
         "reduce_scatter": lambda i, o, w: (w - 1) / w * i}
    return sum(f[op](i, o, w) for op, i, o, w in log if w > 1)


def _theory(W, sp):
    if W == 1: return 0.0
    L, d = CFG["n_layer"], CFG["n_embd"]
    Tp = shard_size(T, W) * W if sp else T
    act = (4 + 8 * L) * (W - 1) / W * B * Tp * d
    loss = 3 * 2 * (W - 1) / W * B * T
    c = GPTConfig(**CFG); hd = c.head_dim
    per_layer = d * c.n_head * hd + 2 * d * c.n_kv_head * hd + c.n_head * hd * d + 2 * d * 4 * d
    muon = (W - 1) / W * L * per_layer
    return act + loss + muon + (2 * 2 * (W - 1) / W * L if sp else 0.0)


def _run(sp):
    mesh = init_mesh(tp=dist.get_world_size())
    torch.manual_seed(0)
    model = parallelize(build_model(GPTConfig(**CFG), "cpu"), mesh, sp=sp)
    opt = tensor_parallel_optimizer(build_optimizer(model.param_groups()))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, CFG["vocab_size"], (B, T), generator=g), torch.randint(0, CFG["vocab_size"], (B, T), generator=g)
    def step():
        loss = model(x, y); loss.backward(); opt.step(); opt.zero_grad()
    step()
    with count_comm() as log: step()
    dist.barrier(); t0 = time.perf_counter()
    for _ in range(STEPS): step()
    dist.barrier()
    return _wire(log), len(log), (time.perf_counter() - t0) / STEPS


def main():
    print(f"GPT d={CFG['n_embd']} L={CFG['n_layer']} V={CFG['vocab_size']}, batch {B}x{T}; fp32, gloo, 1 thread per rank")
    print(f"{'tp':>3} {'sp':>5} {'collectives':>11} {'measured MB':>12} {'theory MB':>10} {'ms/step':>8} {'tok/s':>8}")
    for W in (1, 2, 4):
        for sp in ((False,) if W == 1 else (False, True)):
            wire, n, dt = run_distributed(_run, W, sp)[0]
            th = _theory(W, sp)
            print(f"{W:>3} {str(sp):>5} {n:>11} {wire * 4 / 1e6:>12.3f} {th * 4 / 1e6:>10.3f} {dt * 1e3:>8.1f} {B * T / dt:>8.0f}")


if __name__ == "__main__":
    main()
