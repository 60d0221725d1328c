"""Today's code against another checkout on the default cpu.sh pretraining step, in alternating fresh processes.

Each round runs one process per code tree (a directory holding `nanolit/`, e.g. `git archive REV nanolit | tar -x`):
build the depth-4 model (B 16 x T 256, vocab 8192) and its Muon + AdamW optimizer as `nanolit.train` does, 2 warm-up
steps, then K timed steps (model(x, y), backward, optimizer step, zero_grad); the median over all rounds is kept.
Usage: python bench/bench_step_ab.py BASE_DIR NEW_DIR [--rounds 3] [--steps 8]"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time, torch
from nanolit.model import GPTConfig, build_model
from nanolit.optim import OptimConfig, build_optimizer
torch.manual_seed(0)
cfg = GPTConfig.from_depth(4, vocab_size=8192, sequence_len=256)
model = build_model(cfg, "cpu")
opt = build_optimizer(model.param_groups(), **OptimConfig().optimizer_kwargs(1.0), model_dim=cfg.n_embd)
g = torch.Generator().manual_seed(1)
x, y = torch.randint(0, 8192, (16, 256), generator=g), torch.randint(0, 8192, (16, 256), generator=g)
ts, losses = [], []
for i in range(2 + int(sys.argv[1])):
    t0 = time.perf_counter()
    loss = model(x, y); loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
    if i >= 2: ts.append(time.perf_counter() - t0)
import nanolit.model
print(json.dumps(dict(ts=ts, losses=losses[:3], file=nanolit.model.__file__)))
'''


def run(code, steps):
    env = {**os.environ, "PYTHONPATH": code}
    out = subprocess.run([sys.executable, "-c", CHILD, str(steps)], env=env, cwd=code, capture_output=True, text=True,
                         check=True)  # cwd: `python -c` puts the working directory first on sys.path
    assert json.loads(out.stdout.strip().splitlines()[-1])["file"].startswith(os.path.abspath(code)), out.stdout
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base"); ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    ts = {a.base: [], a.new: []}
    for _ in range(a.rounds):
        for code in (a.base, a.new):
            r = run(code, a.steps)
            ts[code] += r["ts"]
            print(f"{code}: first losses {r['losses']}, median {statistics.median(r['ts']) * 1e3:.0f} ms", flush=True)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
          f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')}")
    base = statistics.median(ts[a.base])
    for code, t in ts.items():
        m = statistics.median(t)
        print(f"{code:30s} {m * 1e3:8.1f} ms/step  {16 * 256 / m:8,.0f} tok/s  {base / m:5.2f}x the base")


if __name__ == "__main__":
    main()
