"""Pipeline parallel on CPU (gloo, forked ranks): step time and bubble fraction per schedule at pp = 2 and 4, and
activation memory per stage. Run: OMP_NUM_THREADS=1 .venv/bin/python bench/bench_pipeline_parallel.py

- step: median wall time of one training step (forwards + backwards of all m micro-batches), after one warm-up step.
- bubble (events): hand schedules only, from the recorded per-action times: 1 - busy / (p x span).
- bubble (eff): every schedule: 1 - (T_1 / p) / step, with T_1 the one-process time of the same m micro-batches;
  this charges communication and stage imbalance to the bubble too.
- ideal: (p - 1) / (m + p - 1) (GPipe / 1F1B; interleaving with v stages per rank divides it by v).
- act MB/stage: bytes autograd saves for one micro-batch on each stage (saved-tensor hooks, deduplicated by storage)
  times the most micro-batches in flight on that stage (m for AFAB, min(p - s, m) for 1F1B, from the real run).
The model has 8 layers so that pp=4 with 2 stages per rank gives one layer per stage (the zero-bubble schedules need it).
On a 2-core machine pp=4 runs 4 processes on 2 cores: absolute times measure oversubscription as much as pipelining."""
import statistics
import time
import warnings

import torch
import torch.distributed as dist

from nanolit.model import GPTConfig, build_model
from nanolit.parallel.mesh import run_distributed
from nanolit.parallel.pipeline_parallel import (PIPELINE_SCHEDULES, Pipeline, bubble_fraction, ideal_bubble_fraction,
                                                split_model)

warnings.filterwarnings("ignore")
CFG = GPTConfig(sequence_len=64, vocab_size=512, n_layer=8, n_head=4, n_kv_head=4, n_embd=128, window_pattern="L")
M, MB, T, REPS = 8, 2, 64, 3


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, CFG.vocab_size, (M * MB, T), generator=g), torch.randint(0, CFG.vocab_size, (M * MB, T), generator=g)


def _model():
    torch.manual_seed(0)
    return build_model(CFG, "cpu")


def _single():
    m = _model(); idx, tgt = _batch(); ts = []
    for _ in range(REPS + 1):
        t = time.perf_counter()
        for i, y in zip(idx.chunk(M), tgt.chunk(M)): (m(i, y) / M).backward()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[1:])


def _saved_bytes(stage, acts, idx):
    seen = {}
    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes(); return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        stage(*acts, idx=idx)
    return sum(seen.values())


def _run(schedule, pp):
    r = dist.get_rank()
    pipe = Pipeline(_model(), schedule, r, pp, M)
    idx, tgt = _batch()
    ts, ev = [], None
    for k in range(REPS + 1):
        for p in pipe.parameters(): p.grad = None
        dist.barrier(); ev = [] if schedule.startswith("hand_") else None
        t = time.perf_counter(); pipe.step(idx, tgt, events=ev); dist.barrier()
        ts.append(time.perf_counter() - t)
    act = None
    if schedule.startswith("hand_"):
        st = pipe.stages[0]; i0 = idx[:MB]
        x = () if st.is_first else (torch.randn(MB, T, CFG.n_embd, requires_grad=True),) * 2
        n = best = 0
        for e in ev: n += 1 if e["kind"] == "F" else -1; best = max(best, n)
        act = _saved_bytes(st, x, i0) * best / 2**20
    return statistics.median(ts[1:]), ev, act


def main():
    torch.set_num_threads(1)
    _model()   # lazy init in the parent before forking
    t1 = _single()
    print(f"one process, m={M} micro-batches of {MB}x{T}: {t1*1e3:.0f} ms/step")
    print(f"{'pp':>3} {'schedule':<17} {'step ms':>8} {'bubble(events)':>15} {'bubble(eff)':>12} {'ideal':>6}  act MB per stage")
    for pp in (2, 4):
        for s in PIPELINE_SCHEDULES:
            try: outs = run_distributed(_run, pp, s, pp, timeout=300)
            except Exception as e:
                print(f"{pp:>3} {s:<17} FAILED: {str(e).strip().splitlines()[-1][:100]}"); continue
            step = max(o[0] for o in outs)
            be = f"{bubble_fraction([o[1] for o in outs]):.2f}" if outs[0][1] else "-"
            eff = 1 - (t1 / pp) / step
            v = 1 if s in ("hand_afab", "hand_1f1b", "gpipe", "1f1b") else 2
            act = " ".join(f"{o[2]:.2f}" for o in outs) if outs[0][2] is not None else "-"
            print(f"{pp:>3} {s:<17} {step*1e3:8.0f} {be:>15} {eff:12.2f} {ideal_bubble_fraction(pp, M) / v:6.2f}  {act}", flush=True)


if __name__ == "__main__":
    main()
