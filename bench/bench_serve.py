"""The chat server under load: aggregate decode tokens/s and time to first token with 1, 4, 8 and 16 concurrent clients
against sequential serving of the same requests (one client at a time, same server), on a random-weight model over
loopback (uvicorn on 127.0.0.1). Every reply is exactly --new tokens (no stop tokens), greedy; prompts differ per
client. Tokens are counted by the server's engine loop, not by text pieces. The clients run in another process (as
real ones do: in the server's process their threads would take the server's GIL), each with its own connection, made
before the clock starts. Medians of --repeats runs.
Usage: python bench/bench_serve.py [--clients 1,4,8,16] [--new 48] [--max-rows 8] [--repeats 3]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import torch

from nanolit.chat import create_app, start_server
from nanolit.engine import Engine
from nanolit.model import GPTConfig, build_model
from nanolit.tokenizer import Tokenizer


def ask(client, url, text, new):
    "One streamed chat request on `client` (an httpx.Client): (seconds to the first token event, seconds to the end)."
    t0, first = time.perf_counter(), None
    body = dict(messages=[dict(role="user", content=text)], max_tokens=new, temperature=0)
    with client.stream("POST", url + "/chat/completions", json=body, timeout=300) as r:
        assert r.status_code == 200, r.status_code
        for line in r.iter_lines():
            if first is None and line.startswith('data: {"token"'):
                first = time.perf_counter() - t0
    return first if first is not None else float("nan"), time.perf_counter() - t0


def clients(url, texts, new, concurrent):
    """The client process: ask all `texts` at once (threads) or one after another; prints its wall time and TTFTs.
    Each client's httpx.Client (~10-25 ms to make: it loads a certificate store) exists before the clock starts,
    as real clients on their own machines would: made inside the timing, 8 of them are serialized on this
    process's GIL and counted against the concurrent run (measured: ~0.1 s of its ~0.4 s at 8 clients)."""
    pool = [httpx.Client() for _ in texts]
    with ThreadPoolExecutor(len(texts) if concurrent else 1) as ex:
        t0 = time.perf_counter()
        res = list(ex.map(lambda i: ask(pool[i], url, texts[i], new), range(len(texts))))
        wall = time.perf_counter() - t0
    for c in pool:
        c.close()
    print(json.dumps(dict(wall=wall, ttft=[r[0] for r in res])))


def run(url, loop, texts, new, concurrent):
    "Serve `texts` concurrently or one after another, asked from another process: (tokens/s, median TTFT s)."
    job = json.dumps(dict(url=url, texts=texts, new=new, concurrent=concurrent))
    n0 = loop.tokens
    out = subprocess.run([sys.executable, __file__, "--client-job", job], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert loop.tokens - n0 == len(texts) * new, (loop.tokens - n0, len(texts) * new)  # every reply made in full
    return len(texts) * new / res["wall"], statistics.median(res["ttft"])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-layer", type=int, default=4); ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192); ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--clients", default="1,4,8,16"); ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--max-rows", type=int, default=8); ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--client-job", help=argparse.SUPPRESS)   # internal: run as the client process
    a = ap.parse_args()
    if a.client_job:
        return clients(**json.loads(a.client_job))
    torch.manual_seed(0)
    cfg = GPTConfig(sequence_len=a.seq_len, vocab_size=a.vocab, n_layer=a.n_layer, n_head=4, n_kv_head=2,
                    n_embd=a.n_embd, window_pattern="SSSL")
    ranks = {bytes([i]): i for i in range(256)}                   # bytes, then byte pairs: a tokenizer that decodes
    pairs = (bytes([x, y]) for x in range(32, 127) for y in range(256))  # every id of the model's vocabulary
    n_special = len(Tokenizer(dict(ranks)).special_tokens)
    while len(ranks) < a.vocab - n_special:
        ranks[next(pairs)] = len(ranks)
    tok = Tokenizer(ranks)
    cfg.vocab_size = tok.vocab_size
    model = build_model(cfg, "cpu").eval()
    app = create_app(model, tok, engine=Engine(model, tok, stop_tokens=set()), max_concurrent=a.max_rows,
                     max_queue=64, max_tokens_limit=a.new)
    server, url = start_server(app)
    loop = app.state.engine_loop
    print(f"cpu threads={torch.get_num_threads()} n_layer={a.n_layer} n_embd={a.n_embd} vocab={a.vocab} "
          f"max_rows={a.max_rows} new={a.new} tokens per reply; load {os.getloadavg()[0]:.2f}")
    try:
        ask(httpx.Client(), url, "warm up", 4)
        print(f"\n{'clients':>7} {'sequential tok/s':>17} {'concurrent tok/s':>17} {'ratio':>6} "
              f"{'TTFT seq ms':>12} {'TTFT conc ms':>13}")
        for n in map(int, a.clients.split(",")):
            texts = [f"Client {i} asks question number {i * 7 % 13} " + "please " * (i % 5) for i in range(n)]
            seq, conc = [], []
            for _ in range(a.repeats):                            # alternated, medians
                seq.append(run(url, loop, texts, a.new, False))
                conc.append(run(url, loop, texts, a.new, True))
            s, c = (statistics.median(r[0] for r in x) for x in (seq, conc))
            ts, tc = (statistics.median(r[1] for r in x) * 1e3 for x in (seq, conc))
            print(f"{n:>7} {s:17.1f} {c:17.1f} {c / s:5.2f}x {ts:12.1f} {tc:13.1f}")
    finally:
        server.should_exit = True
        server.thread.join(5)


if __name__ == "__main__":
    main()
