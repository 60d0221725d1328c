"""Inference engine speed and memory, on one random-weight model:
1. decode tokens/s of today's continuous-batching engine (`ContinuousBatch`) against the engine before it (the
   `Engine.generate` of git revision --baseline-rev, run from that revision's own files in a subprocess), at batch 1
   (greedy) and batch 8 (8 samples of one prompt, temperature 1), alternated --repeats times, medians and ratios;
   plus the new engine on 8 *different* prompts of different lengths (masked attention over ragged rows), and the
   naive `nanolit.model.generate` (one full forward per token) as the floor;
2. where a batch-8 decode step of the new engine goes: the model's forward, per-row sampling, the scheduler's Python;
3. prefill tokens/s against a plain forward without a cache;
4. the KV cache's bytes against 2 * n_layer * B * T * n_kv_head * head_dim * bytes.
Usage: python bench/bench_engine.py [--n-layer 4] [--n-embd 256] [--prompt 64] [--new 64] [--baseline-rev 5bd8d61]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def build(a):
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import Tokenizer
    cfg = GPTConfig(sequence_len=a.seq_len, vocab_size=a.vocab, n_layer=a.n_layer, n_head=a.n_head,
                    n_kv_head=a.n_kv_head, n_embd=a.n_embd, window_pattern=a.window_pattern)
    torch.manual_seed(0)
    model = build_model(cfg, "cpu").eval()
    tok = Tokenizer({bytes([i]): i for i in range(256)})          # byte-level: only its special-token ids are used
    prompt = torch.randint(0, 256, (a.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    return cfg, model, tok, prompt


def rate_old(eng, prompt, B, new, temperature):
    "Tokens/s of `Engine.generate` after its first step (prompt processing left out)."
    it = eng.generate(prompt, B, max_tokens=new, temperature=temperature)
    next(it); t0, n = time.perf_counter(), 0
    for _ in it: n += 1
    return B * n / (time.perf_counter() - t0)


def rate_new(eng, prompts, new, temperature):
    "Tokens/s of a ContinuousBatch holding all `prompts` after its first step (every prefill done by then)."
    from nanolit.engine import ContinuousBatch, Request
    cb = ContinuousBatch(eng, len(prompts))
    for i, p in enumerate(prompts): cb.submit(Request(p, max_tokens=new, temperature=temperature, seed=i))
    cb.step(); t0, n = time.perf_counter(), 0
    while not cb.idle: n += sum(e.token is not None for e in cb.step())
    return n / (time.perf_counter() - t0)


def worker(a):
    "One measurement of one engine, printed as JSON (run in a subprocess, on today's tree or the baseline's)."
    from nanolit.engine import Engine
    cfg, model, tok, prompt = build(a)
    eng = Engine(model, tok, stop_tokens=set())                   # no stop tokens: every run makes --new tokens
    old = a.worker == "old"
    run = (lambda B, t: rate_old(eng, prompt, B, a.new, t)) if old else (lambda B, t: rate_new(eng, [prompt] * B, a.new, t))
    run(a.batch, 1.0)                                             # warm-up (allocator, kernels)
    out = {"b1": run(1, 0.0), f"b{a.batch}": run(a.batch, 1.0)}
    if not old:                                                   # 8 different prompts, 1/2 to 3/2 of --prompt long
        g = torch.Generator().manual_seed(1)
        lens = [a.prompt // 2 + (a.prompt * i) // max(1, a.batch - 1) for i in range(a.batch)]
        out["mixed"] = rate_new(eng, [torch.randint(0, 256, (n,), generator=g).tolist() for n in lens], a.new, 1.0)
    print(json.dumps(out))


def baseline_tree(rev):
    "The `nanolit` package of git revision `rev`, extracted into a temporary directory (its path)."
    d = tempfile.mkdtemp(prefix=f"nanolit_{rev}_")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "nanolit"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(tar)) as t: t.extractall(d)
    return d


def measure(a, which, tree):
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()), "PYTHONPATH": tree}
    args = [sys.executable, __file__, "--worker", which] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
                                                             if k not in ("worker", "baseline_rev", "repeats")]
    r = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tree)
    if r.returncode: sys.exit(f"{which} worker failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def step_profile(a, eng, prompts):
    "Median ms per decode step of a ContinuousBatch over `prompts`: forward, sampling, and the rest of `step`."
    from nanolit import engine as E
    times = {"forward": [], "sampling": []}
    fwd, samp = eng.model.forward, E.sample_rows
    def timed(name, fn):
        def f(*x, **kw):
            t0 = time.perf_counter(); out = fn(*x, **kw); times[name].append(time.perf_counter() - t0); return out
        return f
    cb = E.ContinuousBatch(eng, len(prompts))
    for i, p in enumerate(prompts): cb.submit(E.Request(p, max_tokens=a.new, temperature=1.0, seed=i))
    cb.step()
    eng.model.forward, E.sample_rows = timed("forward", fwd), timed("sampling", samp)
    total = []
    try:
        while not cb.idle:
            t0 = time.perf_counter(); cb.step(); total.append(time.perf_counter() - t0)
    finally:
        del eng.model.forward; E.sample_rows = samp
    n = min(len(total), len(times["forward"]), len(times["sampling"]))
    f, s, t = (statistics.median(x[:n]) * 1e3 for x in (times["forward"], times["sampling"], total))
    return f, s, t - f - s, t


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-layer", type=int, default=4); ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4); ap.add_argument("--n-kv-head", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192); ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--window-pattern", default="SSSL")
    ap.add_argument("--prompt", type=int, default=64); ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--baseline-rev", default="5bd8d61", help="the engine to compare against (before continuous batching)")
    ap.add_argument("--repeats", type=int, default=3); ap.add_argument("--worker", choices=["old", "new"])
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    from nanolit.engine import Engine, WindowedKVCache, kv_cache_bytes
    from nanolit.model import generate
    cfg, model, tok, prompt = build(a)
    print(f"cpu threads={torch.get_num_threads()} n_layer={a.n_layer} n_embd={a.n_embd} heads={a.n_head}/{a.n_kv_head} "
          f"vocab={a.vocab} windows={model.windows} prompt={a.prompt} new={a.new}; load {os.getloadavg()[0]:.2f}")
    old_tree = baseline_tree(a.baseline_rev)
    runs = {"old": [], "new": []}
    for _ in range(a.repeats):                                    # alternated: a busy machine hits both alike
        for which in ("old", "new"):
            runs[which].append(measure(a, which, old_tree if which == "old" else str(ROOT)))
    med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
    B = f"b{a.batch}"
    with torch.inference_mode():
        it = iter(generate(model, prompt, 16, temperature=0)); next(it); t0 = time.perf_counter(); n = sum(1 for _ in it)
    naive = n / (time.perf_counter() - t0)
    print(f"\ndecode tokens/s, medians of {a.repeats} alternated runs (after each engine's first step)")
    print(f"  naive generate (full forward per token)   {naive:10.1f}")
    print(f"  engine @{a.baseline_rev}, batch 1 (greedy)        {med['old']['b1']:10.1f}   1.00x")
    print(f"  continuous batch, batch 1                 {med['new']['b1']:10.1f}   {med['new']['b1'] / med['old']['b1']:5.2f}x")
    print(f"  engine @{a.baseline_rev}, batch {a.batch} (8 samples, t=1) {med['old'][B]:10.1f}   1.00x")
    print(f"  continuous batch, batch {a.batch} (same)          {med['new'][B]:10.1f}   {med['new'][B] / med['old'][B]:5.2f}x")
    print(f"  continuous batch, {a.batch} different prompts     {med['new']['mixed']:10.1f}   "
          f"{med['new']['mixed'] / med['old'][B]:5.2f}x   (ragged rows, masked attention)")

    eng = Engine(model, tok, stop_tokens=set())
    g = torch.Generator().manual_seed(1)
    mixed = [torch.randint(0, 256, (a.prompt // 2 + (a.prompt * i) // max(1, a.batch - 1),), generator=g).tolist()
             for i in range(a.batch)]
    print(f"\nwhere a decode step goes, batch {a.batch}, continuous batch (median ms per step)")
    for name, ps in (("same prompt", [prompt] * a.batch), ("different prompts", mixed)):
        f, s, rest, t = step_profile(a, eng, ps)
        print(f"  {name:18s} forward {f:6.2f}   sampling {s:5.2f}   scheduler {rest:5.2f}   step {t:6.2f}")

    ids = torch.tensor([prompt])
    def prefill():
        cache = WindowedKVCache.for_model(model, 1, capacity=a.prompt)
        model(ids, kv_cache=cache); return cache
    with torch.inference_mode():
        times = {"plain forward": float("inf"), "engine prefill": float("inf")}
        for _ in range(8):                                    # interleaved, best of 8: robust to a busy machine
            for name, fn in (("plain forward", lambda: model(ids)), ("engine prefill", prefill)):
                t0 = time.perf_counter(); fn()
                times[name] = min(times[name], time.perf_counter() - t0)
        print(f"\nprefill tokens/s ({a.prompt}-token prompt, batch 1)")
        for name, t in times.items():
            print(f"  {name:22s}  {a.prompt / t:10.1f}   {times['plain forward'] / t:5.2f}x plain forward")
        cache = prefill().expand(a.batch, capacity=a.prompt + a.new - 1)
        T, el = cache.capacity, cache.kv.element_size()
        theory = kv_cache_bytes(cfg.n_layer, a.batch, T, cfg.n_kv_head, cfg.head_dim, el)
        held = cache.kv.untyped_storage().nbytes()
        print(f"\nKV cache, batch {a.batch} x {T} positions, {cache.kv.dtype}")
        print(f"  theoretical 2*L*B*T*Hkv*D*bytes   {theory / 2**20:8.3f} MiB")
        print(f"  storage held by the cache         {held / 2**20:8.3f} MiB   {held / theory:5.2f}x theoretical")
        full = kv_cache_bytes(cfg.n_layer, a.batch, cfg.sequence_len, cfg.n_kv_head, cfg.head_dim, el)
        print(f"  (a cache for the full {cfg.sequence_len}-token context would be {full / 2**20:.3f} MiB; "
              f"MHA instead of GQA {cfg.n_head // cfg.n_kv_head}x that)")


if __name__ == "__main__":
    main()
