"""The default pretraining step of runs/cpu.sh (depth 4, B 16 x T 256, vocab 8192, Muon + AdamW), today's against the
variants, interleaved in one process: rounds of K steps of each variant in turn, the median ms/step of each.
A step = model(x, y) (the loss) + backward + optimizer step + zero_grad, as `nanolit.train`'s loop runs it.

Variants (the loss is where the time goes: the (B T, V) logits' matmuls and elementwise passes, see dev/LOG.md):
  recompute   the chunked loss recomputing each block's logits in backward, 256 MiB blocks (the loss before `fused`)
  fused       the block's gradient made in the forward while its logits exist (`chunked_lm_loss(fused=True)`)
  fused_rows  fused, and blocks of R rows (`--rows`; the default is `LOSS_CHUNK_BYTES_CPU`, 512 rows at V 8192)
  compiled    `torch.compile(model)` over the default step (cold compile time printed separately)
Usage: python bench/bench_cpu_step.py [--rounds 3] [--per-round 4] [--rows 256,1024] [--compile]"""
import argparse
import contextlib
import functools
import statistics
import subprocess
import time

import torch

import nanolit.model as M
from nanolit.model import GPTConfig, build_model
from nanolit.optim import OptimConfig, build_optimizer

B, T, V, DEPTH = 16, 256, 8192, 4


@contextlib.contextmanager
def loss_setting(fused=None, rows=None):
    "Run the model's loss with `fused` and blocks of `rows` (None: the defaults)."
    orig, old_bytes = M.chunked_lm_loss, M.LOSS_CHUNK_BYTES_CPU
    if fused is not None:
        M.chunked_lm_loss = functools.partial(orig, fused=fused)
    if rows:
        M.LOSS_CHUNK_BYTES_CPU = rows * 4 * V
    try:
        yield
    finally:
        M.chunked_lm_loss, M.LOSS_CHUNK_BYTES_CPU = orig, old_bytes


def build(compiled=False):
    torch.manual_seed(0)
    cfg = GPTConfig.from_depth(DEPTH, vocab_size=V, sequence_len=T)
    model = build_model(cfg, "cpu")
    opt = build_optimizer(model.param_groups(), **OptimConfig().optimizer_kwargs(1.0), model_dim=cfg.n_embd)
    return (torch.compile(model, dynamic=False) if compiled else model), opt


def step(model, opt, x, y):
    loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=4)
    ap.add_argument("--rows", default="256", help="comma-separated block sizes (rows) of the fused_rows variants")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(model) (minutes of cold compile)")
    a = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, V, (B, T), generator=g), torch.randint(0, V, (B, T), generator=g)
    big = M.LOSS_CHUNK_BYTES // (4 * V)  # the 256 MiB blocks every device used before LOSS_CHUNK_BYTES_CPU
    variants = {"recompute": dict(fused=False, rows=big), "fused": dict(fused=True, rows=big)}
    variants |= {f"fused_rows{r}": dict(fused=True, rows=int(r)) for r in a.rows.split(",")}
    if a.compile:
        variants["compiled"] = dict(compiled=True)
    built, first = {}, {}
    for name, v in variants.items():
        with loss_setting(v.get("fused"), v.get("rows")):
            t0 = time.perf_counter()
            built[name] = build(v.get("compiled", False))
            first[name] = [step(*built[name], x, y) for _ in range(2)]  # warm-up (and the cold compile)
            print(f"{name:16s} built and warmed in {time.perf_counter() - t0:6.1f} s; first losses {first[name]}")
    times = {n: [] for n in variants}
    for _ in range(a.rounds):
        for name, v in variants.items():
            with loss_setting(v.get("fused"), v.get("rows")):
                for _ in range(a.per_round):
                    t0 = time.perf_counter()
                    step(*built[name], x, y)
                    times[name].append(time.perf_counter() - t0)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), f"| {torch.get_num_threads()} threads")
    ref = statistics.median(times["recompute"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:16s} {m * 1e3:8.1f} ms/step  {B * T / m:8,.0f} tok/s  {ref / m:5.2f}x recompute")


if __name__ == "__main__":
    main()
