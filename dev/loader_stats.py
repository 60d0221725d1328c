"""Distinct documents per 100 steps, rows that pack several documents, and tokens kept, for each long-document rule
(issue 16), on the built corpus.

Usage: python dev/loader_stats.py [--steps 100] [--B 16] [--T 256]; reads $NANOLIT_BASE_DIR's tokenizer and train shards.
"""

import argparse
import time

import torch

from nanolit.data import HeadTailLoader, make_loader
from nanolit.tokenizer import get_tokenizer


def track(loader):
    "Record the document position of every piece a row takes (wraps each stream's `_pop`)."
    seen = []
    for stream in [loader.heads, loader.tails] if isinstance(loader, HeadTailLoader) else [loader]:
        pop = stream._pop

        def wrapped(i, stream=stream, pop=pop):
            seen.append(stream._pos[i][0])
            return pop(i)

        stream._pop = wrapped
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=256)
    a = ap.parse_args()
    tok = get_tokenizer()
    print(f"| rule | distinct documents in {a.steps} steps | head rows | rows of 2+ documents | tails never served | "
          "lost to row fills | s |")
    print("|---|---|---|---|---|---|---|")
    for name, kw in [("split", dict(long_docs="split")), ("crop", dict(long_docs="crop")),
                     ("mix 0.5", dict(long_docs="mix", tail_share=0.5)), ("mix 0.4", dict(long_docs="mix", tail_share=0.4)),
                     ("mix 0.3", dict(long_docs="mix", tail_share=0.3))]:
        t0 = time.time()
        loader = make_loader(tok, a.B, a.T, **kw)
        seen = track(loader)
        packed = 0  # rows holding more than one BOS-led piece: the only rows a document mask would change
        for _ in range(a.steps):
            x, y = next(loader)
            rows = torch.cat([x, y[:, -1:]], 1)  # the whole T+1-token rows: a BOS can sit in the last place too
            packed += int(((rows == tok.bos_token_id).sum(1) > 1).sum())
        st = loader.stats
        heads = sum(not loader.is_tail_row(r) for r in range(loader.rows)) if isinstance(loader, HeadTailLoader) else "-"
        fill = st["tokens_cropped_fill"]
        never = st["tokens_cropped"] - fill if kw["long_docs"] == "crop" else 0  # mix: the tail stream serves them
        print(f"| {name} | {len(set(seen)):,} | {heads} | {packed} | {never / st['tokens_read']:.1%} | {fill / st['tokens_read']:.2%} | "
              f"{time.time() - t0:.1f} |")


if __name__ == "__main__":
    main()
