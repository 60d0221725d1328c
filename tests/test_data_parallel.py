"""Every data-parallel rung of 06b on the real GPT: bucketed all-reduce, DDP, ZeRO-1 MuonAdamW and FSDP2 at world 2
and 4 with gradient accumulation 1 and 4 end where one process with the same total batch ends (forked gloo ranks).

Runs in float64: the optimizer's AdamW uses eps = 1e-10, so a gradient element that cancels to ~1e-9 in fp32 turns
into a full +-lr step whose sign depends on the summation order, which differs between 1 and W ranks (see
tests/test_train_dist.py). In fp64 the residue is ~1e-17, so the comparison measures data parallelism, not rounding.
Muon's Newton-Schulz runs in fp32 on the CPU by the precision policy; its ~1e-7 rounding moves the weights by ~1e-9,
enough to flip the sign of near-zero embedding gradients under Adam's tiny eps (seen: 1.7e-4 differences in 16 of
32768 value-embedding entries). So the tests also run Newton-Schulz in the parameters' dtype (fp64), by patching
the policy hook `nanolit.optim._ns_dtype`."""
import os
import warnings
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist

import nanolit.optim

from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.data_parallel import (GradBucketer, ZeroMuonAdamW, allreduce_gradients, apply_fsdp,
                                            clip_grad_norm_, replicas_max_diff, shard_optimizer, wrap_ddp)
from nanolit.parallel.mesh import run_distributed

warnings.filterwarnings("ignore", category=FutureWarning)
_NS_DTYPE = nanolit.optim._ns_dtype
CFG = dict(depth=2, vocab_size=256, sequence_len=32, head_dim=32)
B, STEPS, CLIP = 16, 3, 0.5   # global batch of 16 sequences of 32 tokens; 3 optimizer steps


def _fp64():
    os.environ["NANOLIT_DTYPE"] = "float64"
    torch.set_default_dtype(torch.float64)
    nanolit.optim._ns_dtype = lambda G: G.dtype


def _model():
    torch.manual_seed(0)
    return build_model(GPTConfig.from_depth(CFG["depth"], vocab_size=CFG["vocab_size"], sequence_len=CFG["sequence_len"],
                                            head_dim=CFG["head_dim"]), "cpu")


def _opt(model): return build_optimizer(model.param_groups(), model_dim=model.config.n_embd)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, CFG["vocab_size"], (B, CFG["sequence_len"] + 1), generator=g) for _ in range(STEPS)]


def _micro(batch, rank, world, accum):
    n = B // world; m = n // accum
    return [(batch[rank*n + i*m: rank*n + (i+1)*m, :-1], batch[rank*n + i*m: rank*n + (i+1)*m, 1:]) for i in range(accum)]


def _sd(model):
    return {k.removeprefix("module."): (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}


def _reference(adamw=False, clip=0.0):
    "One process, the whole batch at once."
    _fp64()
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if adamw else _opt(model)
    for batch in _batches():
        model(batch[:, :-1], batch[:, 1:]).backward()
        if clip: torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step(); opt.zero_grad(set_to_none=True)
    return _sd(model)


def _rungs(accum):
    "On every rank: each rung trains a fresh model for STEPS steps; returns {rung: state dict} and diagnostics."
    _fp64()
    world, rank = dist.get_world_size(), dist.get_rank()
    out, info = {}, {}

    # rung 1: naive per-parameter all-reduce
    model = _model(); opt = _opt(model)
    for batch in _batches():
        for x, y in _micro(batch, rank, world, accum): (model(x, y) / accum).backward()
        allreduce_gradients(model.parameters()); opt.step(); opt.zero_grad(set_to_none=True)
    out["naive"] = _sd(model)

    # rung 2: buckets from hooks, no communication before the last micro-step
    calls, real = [], dist.all_reduce
    dist.all_reduce = lambda *a, **kw: (calls.append(1), real(*a, **kw))[1]
    model = _model(); opt = _opt(model); bucketer = GradBucketer(model.parameters(), bucket_mb=0.25)
    per_micro = []
    for batch in _batches():
        for i, (x, y) in enumerate(_micro(batch, rank, world, accum)):
            with bucketer.no_sync() if i < accum - 1 else nullcontext():
                n0 = len(calls); (model(x, y) / accum).backward(); per_micro.append(len(calls) - n0)
        bucketer.finish(); opt.step(); opt.zero_grad(set_to_none=True)
    dist.all_reduce = real
    out["bucket"], info["per_micro"], info["buckets"] = _sd(model), per_micro, len(bucketer.buckets)

    # rung 3: DDP
    model = wrap_ddp(_model()); opt = _opt(model.module)
    for batch in _batches():
        for i, (x, y) in enumerate(_micro(batch, rank, world, accum)):
            with model.no_sync() if i < accum - 1 else nullcontext(): (model(x, y) / accum).backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    out["ddp"] = _sd(model)

    # rung 4: ZeRO-1 MuonAdamW (also with clipping by the global norm)
    for name, clip in (("zero", 0.0), ("zero_clip", CLIP)):
        model = _model(); full = _opt(model); opt = shard_optimizer(full)
        for batch in _batches():
            for x, y in _micro(batch, rank, world, accum): (model(x, y) / accum).backward()
            if clip: clip_grad_norm_(opt, clip)
            opt.step(); opt.zero_grad()
        out[name] = _sd(model)
        info[name + "_diff"] = replicas_max_diff(model)
    info["zero_state_bytes"] = opt.state_bytes()
    sd = opt.state_dict()
    info["zero_state_dict_ok"] = sd["zero"]["world_size"] == world and sd["zero"]["rank"] == rank

    # rung 4 ter: ZeRO-2, overlapped: reduce-scatters launched from backward hooks, gradients freed as they go
    calls = []
    name_rs = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"
    real = getattr(dist, name_rs)
    setattr(dist, name_rs, lambda *a, **kw: (calls.append(1), real(*a, **kw))[1])
    model = _model(); opt = shard_optimizer(_opt(model), bucket_mb=0.05, overlap=True).attach(model)
    per_micro, freed = [], []
    for batch in _batches():
        for i, (x, y) in enumerate(_micro(batch, rank, world, accum)):
            with opt.no_sync() if i < accum - 1 else nullcontext():
                n0 = len(calls); (model(x, y) / accum).backward(); per_micro.append(len(calls) - n0)
        freed.append(all(p.grad is None for p in model.parameters()))
        clip_grad_norm_(opt, CLIP); opt.step(); opt.zero_grad()
    setattr(dist, name_rs, real)
    out["zero2_clip"], info["zero2_per_micro"], info["zero2_freed"] = _sd(model), per_micro, freed
    info["zero2_buckets"] = sum(len(L["buckets"]) for L in opt.layouts)
    info["zero2_diff"], info["zero2_state_bytes"] = replicas_max_diff(model), opt.state_bytes()
    info["zero2_muon_owned"] = sum(o == rank for L, g in zip(opt.layouts, opt.param_groups) if g["kind"] == "muon"
                                   for o in L["owners"])

    # rung 4 bis: replicated with clipping after the all-reduce
    model = _model(); opt = _opt(model)
    for batch in _batches():
        for x, y in _micro(batch, rank, world, accum): (model(x, y) / accum).backward()
        allreduce_gradients(model.parameters()); clip_grad_norm_(model.parameters(), CLIP)
        opt.step(); opt.zero_grad(set_to_none=True)
    out["naive_clip"] = _sd(model)

    # rung 5: FSDP2 with torch's AdamW (and clipping over DTensor shards)
    for name, clip in (("fsdp", 0.0), ("fsdp_clip", CLIP)):
        model = apply_fsdp(_model()); opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for batch in _batches():
            for i, (x, y) in enumerate(_micro(batch, rank, world, accum)):
                model.set_requires_gradient_sync(i == accum - 1)
                (model(x, y) / accum).backward()
            if clip: clip_grad_norm_(model.parameters(), clip)
            opt.step(); opt.zero_grad()
        out[name] = _sd(model)
    return out, info


@pytest.fixture(scope="module")
def refs():
    saved = torch.get_default_dtype()
    try:
        r = dict(muon=_reference(), adamw=_reference(adamw=True), muon_clip=_reference(clip=CLIP),
                 adamw_clip=_reference(adamw=True, clip=CLIP))
        model = _model(); opt = _opt(model)
        model(*(lambda b: (b[:, :-1], b[:, 1:]))(_batches()[0])).backward(); opt.step()
        r["state_bytes"] = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values())
        return r
    finally:
        torch.set_default_dtype(saved); os.environ.pop("NANOLIT_DTYPE", None); nanolit.optim._ns_dtype = _NS_DTYPE


def _close(a, b, tol=1e-5, what=""):
    for k in b: torch.testing.assert_close(a[k], b[k], atol=tol, rtol=tol, msg=lambda m: f"{what} {k}: {m}")


@pytest.mark.parametrize("world,accum", [(2, 1), (2, 4), (4, 1), (4, 4)])
def test_rungs_equal_one_process(refs, world, accum):
    outs = run_distributed(_rungs, world, accum, timeout=300)
    for rank, (out, info) in enumerate(outs):
        # ladder: each rung equal to the one before; bitwise at world 2 where the sums have the same two terms
        tol = 0 if world == 2 else 1e-5
        _close(out["bucket"], out["naive"], tol, "bucket vs naive")
        _close(out["ddp"], out["bucket"], tol, "ddp vs bucket")
        _close(out["zero"], out["ddp"], tol, "zero vs ddp")
        for rung in ("naive", "bucket", "ddp", "zero"): _close(out[rung], refs["muon"], 1e-5, rung)
        _close(out["fsdp"], refs["adamw"], 1e-5, "fsdp")
        _close(out["naive_clip"], refs["muon_clip"], 1e-5, "naive_clip")
        _close(out["zero_clip"], refs["muon_clip"], 1e-5, "zero_clip")
        _close(out["zero2_clip"], refs["muon_clip"], 1e-5, "zero2_clip")
        # Not bitwise: the clip's global norm sums per-shard partial norms, and ZeRO-1 and ZeRO-2 (0.05 MB buckets)
        # shard differently; the reduction kernel's vector width sets their rounding (AVX-512 kernels: a 1-ulp
        # difference in one residual scalar, 2026-12-04; AVX2 and scalar kernels: equal). float64, so 1e-12.
        _close(out["zero2_clip"], out["zero_clip"], tol or 1e-12, "zero2_clip vs zero_clip")
        # ZeRO-2: no communication before the last micro-step, every bucket launched during its backward
        assert info["zero2_per_micro"] == ([0] * (accum - 1) + [info["zero2_buckets"]]) * STEPS, info
        assert info["zero2_buckets"] > 4 and all(info["zero2_freed"]) and info["zero2_diff"] == 0.0
        _close(out["fsdp_clip"], refs["adamw_clip"], 1e-5, "fsdp_clip")
        # no communication before the last micro-step; one all-reduce per bucket on it
        assert info["buckets"] > 1
        assert info["per_micro"] == ([0] * (accum - 1) + [info["buckets"]]) * STEPS
        assert info["zero_diff"] == 0.0 and info["zero_clip_diff"] == 0.0   # ranks never diverge
        assert info["zero_state_dict_ok"]
        if rank > 0:  # every rank holds the same parameters
            for rung in out: _close(out[rung], outs[0][0][rung], 0, f"rank {rank} {rung}")
    owned = [info["zero2_muon_owned"] for _, info in outs]   # 8 block matrices at d2: dealt evenly
    assert max(owned) - min(owned) <= 1, owned
    z2 = [info["zero2_state_bytes"] for _, info in outs]
    assert sum(z2) < 1.05 * refs["state_bytes"] and max(z2) < 1.35 * refs["state_bytes"] / world, z2
    per_rank = [info["zero_state_bytes"] for _, info in outs]
    print(f"\nworld {world}: ZeRO-1 optimizer state per rank {per_rank} B, unsharded {refs['state_bytes']} B "
          f"(ratio max/unsharded {max(per_rank) / refs['state_bytes']:.3f}, ideal {1 / world:.3f})")
    assert sum(per_rank) < 1.05 * refs["state_bytes"]          # nothing duplicated (padding and step counters only)
    assert max(per_rank) < 1.35 * refs["state_bytes"] / world  # and close to 1/W on every rank
