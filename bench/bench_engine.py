"""Inference engine speed and memory: decode tokens/s of `nanolit.engine.Engine` at batch 1 and batch 8 against the naive
`nanolit.model.generate` (one full forward per token) on the same random-weight model in the same run; prefill tokens/s
against a plain forward without a cache; the KV cache's bytes against 2 * n_layer * B * T * n_kv_head * head_dim * bytes.
Usage: python bench/bench_engine.py [--n-layer 4] [--n-embd 256] [--prompt 64] [--new 64] [--device cpu]"""
import argparse
import time

import torch

from nanolit.core import autodetect_device_type
from nanolit.engine import Engine, WindowedKVCache, kv_cache_bytes
from nanolit.model import GPTConfig, build_model, generate
from nanolit.tokenizer import Tokenizer


def sync(device):
    if device.type == "cuda": torch.cuda.synchronize()


def decode_rate(it, rows, device):
    "Tokens/s after the first yielded step (so prompt processing is left out), and the number of steps."
    next(it); sync(device); t0, n = time.perf_counter(), 0
    for _ in it: n += 1
    sync(device)
    return rows * n / (time.perf_counter() - t0), n + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-layer", type=int, default=4); ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-head", type=int, default=4); ap.add_argument("--n-kv-head", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192); ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--window-pattern", default="SSSL")
    ap.add_argument("--prompt", type=int, default=64); ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8); ap.add_argument("--device", default="")
    a = ap.parse_args()
    device = torch.device(a.device or autodetect_device_type())
    cfg = GPTConfig(sequence_len=a.seq_len, vocab_size=a.vocab, n_layer=a.n_layer, n_head=a.n_head, n_kv_head=a.n_kv_head,
                    n_embd=a.n_embd, window_pattern=a.window_pattern)
    torch.manual_seed(0)
    model = build_model(cfg, device).eval()
    tok = Tokenizer({bytes([i]): i for i in range(256)})             # byte-level: only its special-token ids are used
    eng = Engine(model, tok, stop_tokens=set())                       # no stop tokens: every run makes --new tokens
    prompt = torch.randint(0, 256, (a.prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    print(f"device={device.type} threads={torch.get_num_threads()} n_layer={a.n_layer} n_embd={a.n_embd} "
          f"heads={a.n_head}/{a.n_kv_head} vocab={a.vocab} windows={model.windows} prompt={a.prompt} new={a.new}")

    # warm-up (allocator, kernels)
    list(generate(model, prompt, 4, temperature=0)); eng.generate_batch(prompt, a.batch, max_tokens=4)

    naive, n_naive = decode_rate(iter(generate(model, prompt, a.new, temperature=0)), 1, device)
    e1, n1 = decode_rate(eng.generate(prompt, 1, max_tokens=a.new, temperature=0), 1, device)
    eB, nB = decode_rate(eng.generate(prompt, a.batch, max_tokens=a.new, temperature=1.0), a.batch, device)
    assert n_naive == n1 == nB == a.new, (n_naive, n1, nB)
    print(f"\ndecode tokens/s (after the first token; naive at batch {a.batch} = {a.batch} sequential runs, same rate)")
    print(f"  naive generate          {naive:10.1f}   1.00x")
    print(f"  engine batch 1          {e1:10.1f}   {e1 / naive:5.2f}x naive")
    print(f"  engine batch {a.batch:<2d}         {eB:10.1f}   {eB / naive:5.2f}x naive   {eB / e1:5.2f}x engine batch 1")

    ids = torch.tensor([prompt], device=device)
    def prefill():
        cache = WindowedKVCache.for_model(model, 1, capacity=a.prompt)
        model(ids, kv_cache=cache); return cache
    with torch.inference_mode():
        times = {"plain forward": float("inf"), "engine prefill": float("inf")}
        for _ in range(8):                                    # interleaved, best of 8: robust to a busy machine
            for name, fn in (("plain forward", lambda: model(ids)), ("engine prefill", prefill)):
                sync(device); t0 = time.perf_counter(); fn(); sync(device)
                times[name] = min(times[name], time.perf_counter() - t0)
        print(f"\nprefill tokens/s ({a.prompt}-token prompt, batch 1)")
        for name, t in times.items():
            print(f"  {name:22s}  {a.prompt / t:10.1f}   {times['plain forward'] / t:5.2f}x plain forward")

        c1 = prefill()
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
        cache = c1.expand(a.batch, capacity=a.prompt + a.new - 1)
        T, el = cache.capacity, cache.kv.element_size()
        theory = kv_cache_bytes(cfg.n_layer, a.batch, T, cfg.n_kv_head, cfg.head_dim, el)
        held = cache.kv.untyped_storage().nbytes()
        print(f"\nKV cache, batch {a.batch} x {T} positions, {cache.kv.dtype}")
        print(f"  theoretical 2*L*B*T*Hkv*D*bytes  {theory / 2**20:9.3f} MiB")
        print(f"  storage held by the cache        {held / 2**20:9.3f} MiB   {held / theory:5.2f}x theoretical")
        if before is not None:
            alloc = torch.cuda.memory_allocated(device) - before
            print(f"  CUDA allocation for it            {alloc / 2**20:9.3f} MiB   {alloc / theory:5.2f}x theoretical")
        full = kv_cache_bytes(cfg.n_layer, a.batch, cfg.sequence_len, cfg.n_kv_head, cfg.head_dim, el)
        print(f"  (a cache for the full {cfg.sequence_len}-token context would be {full / 2**20:.3f} MiB; "
              f"MHA instead of GQA {cfg.n_head // cfg.n_kv_head}x that)")


if __name__ == "__main__":
    main()
