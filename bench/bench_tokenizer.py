"""Benchmark: `Tokenizer.encode` on the worst inputs found (long runs of one character class, no whitespace, megabyte
lines, random bytes), at 1, 4 and 16 MB. Prints seconds per MB and the ratio to encoding ordinary English prose
(Shakespeare, repeated) of the same size, measured in the same run with the same tokenizer; the "plain" column is one
tiktoken call on the whole text where it survives (it raises PanicException on a million spaces). Time per MB flat
across sizes = linear in the length.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_tokenizer.py [--sizes 1,4,16] [--vocab 4096]
"""

import argparse
import random
import time

from nanolit.core import sample_texts
from nanolit.tokenizer import Tokenizer, cut_pieces, engine_classes

WORST = {
    "spaces": " ",
    "newlines": "\n",
    "tabs": "\t",
    "mixed whitespace": " \t\n\r\xa0\u3000",
    "one letter": "a",
    "digits": "7",
    "punctuation": "!",
    "cjk": "中",
    "emoji": "😀",
    "combining marks": "\u0301",
    "no whitespace": "word,",
    "spaced digits": " 1",
    "indented braces": "\n }",
}


def sized(unit: str, n_bytes: int) -> str:
    return unit * max(1, n_bytes // len(unit.encode()))


def timed(f, *a):
    t0 = time.perf_counter()
    out = f(*a)
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--vocab", type=int, default=4096)
    a = ap.parse_args()
    texts = list(sample_texts().values())
    tok = Tokenizer.train_from_iterator(texts + ["x" + " " * 40 + "y\n\n\t\t 1234 !!!! aaaa 中中中"] * 50, a.vocab)
    engine_classes()  # one-time (about 0.5 s): not part of any measurement
    prose_src = "\n\n".join(texts)
    rng = random.Random(0)
    print(f"vocab {tok.vocab_size}; seconds per MB of UTF-8; ratio = ours / ours on English prose of the same size")
    print(f"{'input':<18}{'MB':>4}{'ours s/MB':>11}{'ratio':>7}{'plain s/MB':>12}{'pieces':>8}{'forced':>8}")
    for mb in [int(x) for x in a.sizes.split(",")]:
        n = mb * 1_000_000
        prose = (prose_src * (n // len(prose_src) + 1))[:n]
        t_prose, _ = timed(tok.encode, prose)
        prose_mb = len(prose.encode()) / 1e6
        t_plain, _ = timed(tok.enc.encode_ordinary, prose)
        p, f = cut_pieces(prose)
        per_mb = f"{t_prose / prose_mb:>11.3f}{1:>7.2f}{t_plain / prose_mb:>12.3f}"
        print(f"{'english prose':<18}{mb:>4}{per_mb}{len(p):>8}{f:>8}")
        cases = {k: sized(u, n) for k, u in WORST.items()}
        cases["random bytes"] = rng.randbytes(n).decode("utf-8", errors="replace")
        cases["1 MB lines"] = "\n".join([prose.replace("\n", " ")[:1_000_000]] * mb)
        for name, s in cases.items():
            t, ids = timed(tok.encode, s)
            assert tok.decode(ids) == s
            size = len(s.encode()) / 1e6  # MB of UTF-8 actually encoded
            try:
                tp = f"{timed(tok.enc.encode_ordinary, s)[0] / size:.3f}" if mb <= 4 else "-"
            except BaseException as e:
                tp = type(e).__name__[:11]  # pyo3_runtime.PanicException on long whitespace runs
            p, f = cut_pieces(s)
            print(
                f"{name:<18}{mb:>4}{t / size:>11.3f}{(t / size) / (t_prose / prose_mb):>7.2f}{tp:>12}{len(p):>8}{f:>8}",
                flush=True,
            )


if __name__ == "__main__":
    main()
