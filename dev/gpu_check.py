"""The GPU check of issue 17, on one CUDA GPU in a few minutes; prints one markdown table (and writes it to $OUT).

1. Attention: every fast path this machine has (FlashAttention-3, flash-attn, FlexAttention) against SDPA and the fp32
   matmul reference, bf16, with and without a window, forward and gradients.
2. Training steps: depth 12 and depth 20 (vocab 65536, T 2048, B 16 x T per micro-step, Muon + AdamW), compiled,
   bf16; 20 steps each on random tokens: tok/s and MFU of the steps after the compile, the cold compile time, and
   the peak memory against `nanolit.train.memory_per_rank` (the plan's traced estimate for this config).
3. FP8: the depth-12 step with the blocks' matmuls in float8 (torchao), when torchao is importable.
4. Issue 16's Canon layers: the depth-12 compiled step with `--canon B` (cpu.sh's default), its tok/s against the
   plain depth-12 step of item 2 (the CPU budget is <= 5%; the GPU cost is unmeasured until this runs).
Rows go to $OUT/gpu_check.md as they come, so a run cut short keeps what it measured.
Usage: python dev/gpu_check.py [--steps 20] [--depths 12,20] [--rows 16] [--canon B]"""
import argparse
import os
import time
import traceback

import torch

from nanolit.attention import _flex_attention, _fa3_func, _flash_attn_func, attention_flex, attention_matmul
import nanolit.attention as A
from nanolit.core import get_peak_flops
from nanolit.model import GPTConfig, build_model
from nanolit.optim import OptimConfig, build_optimizer
from nanolit.train import TrainConfig, apply_fp8, fp8_capable, memory_per_rank

ROWS, HEADER, TPS = [], [""], {}


def row(check, result, detail=""):
    ROWS.append((check, result, detail))
    print(f"| {check} | {result} | {detail} |", flush=True)
    out = os.environ.get("OUT")
    if out:  # rewritten at every row: a run killed by its time limit keeps the rows it made
        with open(os.path.join(out, "gpu_check.md"), "w") as f:
            f.write(f"{HEADER[0]}\n\n| check | result | detail |\n|---|---|---|\n")
            f.writelines(f"| {c} | {r} | {d} |\n" for c, r, d in ROWS)


def attention_checks():
    torch.manual_seed(0)
    B, T, H, D = 2, 1024, 8, 128
    q, k, v = (torch.randn(B, T, H, D, device="cuda") for _ in range(3))
    for window in (None, 256):
        ref = attention_matmul(q, k, v, window)  # fp32
        qb, kb, vb = (t.bfloat16().requires_grad_() for t in (q, k, v))
        paths = {"sdpa": lambda: A.F.scaled_dot_product_attention(
            qb.transpose(1, 2), kb.transpose(1, 2), vb.transpose(1, 2),
            attn_mask=A.attention_mask(T, T, window, device="cuda") if window else None,
            is_causal=window is None).transpose(1, 2)}
        if _flex_attention is not None:
            paths["flex"] = lambda: attention_flex(qb, kb, vb, window)
        if _fa3_func() is not None:
            paths["fa3"] = lambda: _fa3_func()(qb, kb, vb, causal=True, window_size=A._flash_window(window))
        if _flash_attn_func is not None:
            paths["flash-attn"] = lambda: _flash_attn_func(qb, kb, vb, causal=True, window_size=A._flash_window(window))
        grads = {}
        for name, fn in paths.items():
            try:
                y = fn()
                y = y[0] if isinstance(y, tuple) else y
                err = (y.float() - ref).abs().max().item()
                for t in (qb, kb, vb):
                    t.grad = None
                y.float().pow(2).sum().backward()
                grads[name] = [t.grad.float().clone() for t in (qb, kb, vb)]
                gerr = max((a - b).abs().max().item() for a, b in zip(grads[name], grads["sdpa"]))
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) / 10 * 1e3
                ok = err < 3e-2 and gerr < 0.25 * max(1.0, grads["sdpa"][0].abs().max().item())
                row(f"attention {name}, window {window}", "ok" if ok else "MISMATCH",
                    f"max err vs fp32 {err:.2e}, grad vs sdpa {gerr:.2e}, fwd {ms:.2f} ms")
            except Exception as e:
                row(f"attention {name}, window {window}", "ERROR", f"{type(e).__name__}: {str(e)[:120]}")


def train_steps(depth, rows, steps, fp8=False, canon=""):
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    V, T = 65536, 2048
    cfg = GPTConfig.from_depth(depth, vocab_size=V, sequence_len=T, head_dim=128, canon=canon)
    model = build_model(cfg, "cuda")
    if fp8:
        apply_fp8(model)
    opt = build_optimizer(model.param_groups(), **OptimConfig().optimizer_kwargs(1.0), model_dim=cfg.n_embd)
    step_model = torch.compile(model, dynamic=False)
    x = torch.randint(0, V, (rows, T), device="cuda")
    y = torch.randint(0, V, (rows, T), device="cuda")
    times, losses = [], []
    t_start = time.perf_counter()
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step_model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    warm = times[5:] if steps > 8 else times[1:]
    dt = sorted(warm)[len(warm) // 2]
    tps = rows * T / dt
    peak = get_peak_flops("cuda")
    mfu = model.estimate_flops() * tps / peak
    plan, _ = memory_per_rank(
        TrainConfig(depth=depth, head_dim=128, sequence_len=T, device_batch_size=rows, canon=canon), V,
        dtype=torch.bfloat16)
    planned = sum(v for k, v in plan.items() if k != "logits")
    used = torch.cuda.max_memory_allocated()
    name = f"d{depth} {'fp8' if fp8 else 'bf16'}{f' canon {canon}' if canon else ''} compiled, {rows} x {T}"
    ok = all(map(lambda v: v == v and abs(v) < 1e4, losses))
    TPS[(depth, fp8, canon)] = tps
    plain = TPS.get((depth, fp8, "")) if canon else None
    vs = f" ({tps / plain:.3f}x the plain d{depth})" if plain else ""
    row(name, "ok" if ok else "NaN/inf loss",
        f"{tps:,.0f} tok/s{vs}, MFU {mfu:.1%}, first step (compile) {times[0]:.0f} s, "
        f"total {time.perf_counter() - t_start:.0f} s, peak {used / 2**30:.1f} GiB vs plan {planned / 2**30:.1f} GiB "
        f"({used / planned:.2f}x), loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    del model, opt, step_model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--depths", default="12,20")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--canon", default="B", help="Canon sites for item 4 (empty: skip it)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA GPU: this check is for a GPU machine")
    name, cap = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
    HEADER[0] = f"{name}, capability {cap}, torch {torch.__version__}"
    print(f"{HEADER[0]}, peak {get_peak_flops('cuda') / 1e12:.0f} TFLOP/s bf16")
    print("| check | result | detail |\n|---|---|---|")
    for fn, args in [(attention_checks, ())] + [(train_steps, (int(d), a.rows, a.steps)) for d in a.depths.split(",")]:
        try:
            fn(*args)
        except Exception as e:
            traceback.print_exc()
            row(f"{fn.__name__}{args}", "ERROR", f"{type(e).__name__}: {str(e)[:160]}")
        torch.cuda.empty_cache()
    if fp8_capable("cuda"):
        try:
            train_steps(12, a.rows, 6, fp8=True)
        except Exception as e:
            row("d12 fp8", "SKIPPED" if isinstance(e, ValueError) else "ERROR", f"{type(e).__name__}: {str(e)[:160]}")
        torch.cuda.empty_cache()
    if a.canon:
        try:
            train_steps(12, a.rows, a.steps, canon=a.canon)
        except Exception as e:
            traceback.print_exc()
            row(f"d12 canon {a.canon}", "ERROR", f"{type(e).__name__}: {str(e)[:160]}")


if __name__ == "__main__":
    main()
