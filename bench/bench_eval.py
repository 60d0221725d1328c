"""Benchmark: CORE multiple-choice scoring, batched (`continuation_scores`: all choices of an item in one padded
forward pass) against the naive loop (one forward pass per choice through the model's own loss). Prints the time per
item of each and the ratio naive / batched, measured in the same run on the same model and items.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_eval.py [--items 40] [--depth 2]
"""
import argparse
import time

import torch

from nanolit.core import sample_texts
from nanolit.eval import continuation_scores, core_prompts, encode_pair
from nanolit.model import GPTConfig, build_model
from nanolit.tokenizer import Tokenizer


def naive(model, tok, pairs):
    out = []
    for c, x in pairs:
        ids, s = encode_pair(tok, c, x, model.config.sequence_len)
        inp, tgt = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
        tgt[0, :s - 1] = -1
        out.append(model(inp, tgt, loss_reduction="mean").item())
    return out


def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--items", type=int, default=40); ap.add_argument("--depth", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(0)
    text = sample_texts()["sonnets"]
    tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=1024)
    model = build_model(GPTConfig.from_depth(a.depth, tok.vocab_size, sequence_len=256, head_dim=64), "cpu").eval()
    words = text.split()
    items = [dict(query=" ".join(words[i * 30:i * 30 + 40]), choices=[" ".join(words[j:j + 6]) for j in range(i, i + 4)], gold=0)
             for i in range(a.items)]
    fewshot = items[:3]
    prompts = [core_prompts("multiple_choice", it, fewshot) for it in items]
    with torch.no_grad():
        for p in prompts[:2]: continuation_scores(model, tok, p); naive(model, tok, p)   # warm up
        t0 = time.perf_counter(); b = [continuation_scores(model, tok, p)[0] for p in prompts]; tb = time.perf_counter() - t0
        t0 = time.perf_counter(); n = [naive(model, tok, p) for p in prompts]; tn = time.perf_counter() - t0
    torch.testing.assert_close(b, n, rtol=1e-4, atol=1e-5)
    print(f"{a.items} items x 4 choices, depth {a.depth}, 3-shot prompts")
    print(f"batched: {1e3 * tb / a.items:.1f} ms/item | naive loop: {1e3 * tn / a.items:.1f} ms/item | naive/batched = {tn / tb:.2f}x")


if __name__ == "__main__":
    main()
