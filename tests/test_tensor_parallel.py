"""Tensor and sequence parallelism of 06c on forked gloo ranks (world 2 and 4): every layer against nn.Linear /
nn.Embedding / F.cross_entropy in fp32 at 1e-5 (sizes not divisible by the tp size included), the whole GPT under
tp, tp+sp and dp x tp against one process after 3 MuonAdamW steps, and checkpoints moved between tp sizes.

The GPT runs are in float64 for the reason given in tests/test_data_parallel.py (AdamW's eps = 1e-10 turns fp32
summation-order noise on near-zero gradients into +-lr steps); the model still casts logits to fp32 for the loss, so
losses agree to ~1e-7 and parameters to ~1e-9. Tolerance 1e-5 throughout."""
import copy
import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from nanolit.model import GPT, GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.data_parallel import allreduce_gradients
from nanolit.parallel.mesh import init_mesh, run_distributed
from nanolit.parallel.tensor_parallel import (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding,
                                              clip_grad_norm_tp_, full_optimizer_state_dict, full_state_dict,
                                              gather_param, load_full_optimizer_state_dict, load_full_state_dict,
                                              parallelize, shard_size, shard_tensor, tensor_parallel_optimizer,
                                              vocab_parallel_cross_entropy)

warnings.filterwarnings("ignore", category=FutureWarning)
TOL = dict(atol=1e-5, rtol=1e-5)
CFG = dict(sequence_len=16, vocab_size=67, n_layer=2, n_head=8, n_kv_head=4, n_embd=32, window_pattern="SL", short_window=4)
B, T, STEPS = 4, 11, 3   # T = 11: not divisible by 2 or 4 (sequence padding); V = 67 likewise (vocab padding)


def _layers_run():
    """fp32: column -> row pair (hidden 7), row with a full input, vocab embedding (V=11) + softcap + vocab CE."""
    g, r, w = dist.group.WORLD, dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    out = []
    i, h, o = 6, 7, 5
    l1, l2 = nn.Linear(i, h, bias=False), nn.Linear(h, o, bias=False)
    x, gy = torch.randn(3, 5, i), torch.randn(3, 5, o)
    for sp in (False, True):
        a, b = copy.deepcopy(l1), copy.deepcopy(l2)
        xr = x.clone().requires_grad_(); yr = b(torch.relu(a(xr)).square()); (yr * gy).sum().backward()
        c1 = ColumnParallelLinear.from_linear(l1, g, gather_output=False, sequence_parallel=sp)
        r2 = RowParallelLinear.from_linear(l2, g, sequence_parallel=sp)
        xt = (shard_tensor(x, 1, r, w) if sp else x).clone().requires_grad_()
        y = r2(torch.relu(c1(xt)).square())
        (y * (shard_tensor(gy, 1, r, w) if sp else gy)).sum().backward()
        out += [(y.detach(), shard_tensor(yr.detach(), 1, r, w) if sp else yr.detach()),
                (xt.grad, shard_tensor(xr.grad, 1, r, w) if sp else xr.grad),
                (c1.weight.grad, shard_tensor(a.weight.grad, 0, r, w)), (r2.weight.grad, shard_tensor(b.weight.grad, 1, r, w)),
                (gather_param(c1.weight), l1.weight.detach())]
    rs = RowParallelLinear.from_linear(l2, g, input_is_parallel=False)
    hin = torch.randn(3, 5, h, requires_grad=True); (rs(hin) * gy).sum().backward()
    href = hin.detach().clone().requires_grad_(); (l2(href) * gy).sum().backward()
    out += [(rs(hin).detach(), l2(hin).detach()), (hin.grad, href.grad)]
    cg = ColumnParallelLinear.from_linear(l1, g, gather_output=True)
    out += [(cg(x).detach(), l1(x).detach())]
    V, d = 11, 6
    emb, head = nn.Embedding(V, d), nn.Linear(d, V, bias=False)
    idx, tgt = torch.randint(0, V, (3, 5)), torch.randint(0, V, (3, 5)); tgt[0, :2] = -1; tgt[2, 4] = V - 1
    for reduction in ("mean", "sum", "none"):
        e, hd = copy.deepcopy(emb), copy.deepcopy(head)
        z = 15 * torch.tanh(hd(e(idx)) / 15)
        lr = F.cross_entropy(z.view(-1, V), tgt.view(-1), ignore_index=-1, reduction=reduction); lr.sum().backward()
        ep = VocabParallelEmbedding.from_embedding(emb, g); hp = ColumnParallelLinear.from_linear(head, g, gather_output=False)
        zl = 15 * torch.tanh(hp(ep(idx)) / 15)
        assert zl.size(-1) == shard_size(V, w)
        lp = vocab_parallel_cross_entropy(zl, tgt, g, V, reduction=reduction); lp.sum().backward()
        out += [(lp.detach(), lr.detach().view(tgt.shape) if reduction == "none" else lr.detach()),
                (ep.weight.grad, shard_tensor(e.weight.grad, 0, r, w)), (hp.weight.grad, shard_tensor(hd.weight.grad, 0, r, w))]
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_layers(world):
    for pairs in run_distributed(_layers_run, world):
        for n, (a, b) in enumerate(pairs): torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"pair {n}: {m}")


def _fp64():
    import nanolit.optim
    os.environ["NANOLIT_DTYPE"] = "float64"; torch.set_default_dtype(torch.float64)
    nanolit.optim._ns_dtype = lambda G: G.dtype


def _gpt(seed=0):
    torch.manual_seed(seed)
    m = build_model(GPTConfig(**CFG), "cpu")
    with torch.no_grad():
        for p in m.parameters(): p.add_(0.1 * torch.randn_like(p))   # off the zero init: every path carries signal
    return m


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, CFG["vocab_size"], (B, T), generator=g), torch.randint(0, CFG["vocab_size"], (B, T), generator=g))
            for _ in range(STEPS)]


def _gpt_run(tp, sp, clip, okw=None):
    _fp64()
    okw = okw or {}
    mesh = init_mesh(tp=tp)                       # dp = world / tp
    dp, dpr = mesh.size("dp"), mesh.local_rank("dp")
    ref = _gpt(); ropt = build_optimizer(ref.param_groups(), **okw); ref_losses = []
    for xb, yb in _batches():
        loss = ref(xb, yb); loss.backward()
        if clip: torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        ropt.step(); ropt.zero_grad(); ref_losses.append(loss.item())
    model = parallelize(_gpt(), mesh, sp=sp)
    opt = tensor_parallel_optimizer(build_optimizer(model.param_groups(), **okw))
    n, losses = B // dp, []
    for xb, yb in _batches():
        loss = model(xb[dpr * n:(dpr + 1) * n], yb[dpr * n:(dpr + 1) * n]); loss.backward()
        if dp > 1: allreduce_gradients(model.parameters(), mesh.group("dp"))   # group None would mean the WORLD here
        if clip: clip_grad_norm_tp_(model.parameters(), clip, mesh.group("tp"))
        opt.step(); opt.zero_grad(); losses.append(loss.detach())
    losses = torch.stack(losses).double()
    if dp > 1: dist.all_reduce(losses, group=mesh.group("dp")); losses /= dp
    osd, rosd = full_optimizer_state_dict(opt, model), full_optimizer_state_dict(ropt, ref)
    assert set(osd) == set(rosd) and all(torch.allclose(osd[k], rosd[k], **TOL) for k in rosd)
    return losses, torch.tensor(ref_losses), full_state_dict(model), ref.state_dict()


@pytest.mark.parametrize("world,tp,sp,clip,okw", [(2, 2, False, 0.0, None), (2, 2, True, 0.0, None), (4, 4, True, 0.5, None),
                                                  (4, 2, False, 0.0, None), (4, 2, True, 0.5, None),
                                                  (2, 2, False, 0.0, dict(muon_method="polar_express", weight_decay=0.3,
                                                                          cautious_wd=True))])
def test_gpt_matches_one_process(world, tp, sp, clip, okw):
    """tp (world = tp) and dp x tp (world 4, tp 2): same losses, same parameters after 3 steps, clipping included;
    also with Polar Express and cautious weight decay."""
    for losses, ref_losses, sd, rsd in run_distributed(_gpt_run, world, tp, sp, clip, okw):
        torch.testing.assert_close(losses, ref_losses, **TOL)
        assert set(sd) == set(rsd)
        for k in rsd: torch.testing.assert_close(sd[k], rsd[k], **TOL, msg=lambda m: f"{k}: {m}")


def _save_run(path):
    """tp=2 + sp: one step, then the full model and optimizer state saved (rank 0) and the logits returned."""
    _fp64()
    model = parallelize(_gpt(), init_mesh(tp=2), sp=True)
    opt = tensor_parallel_optimizer(build_optimizer(model.param_groups()))
    xb, yb = _batches()[0]
    model(xb, yb).backward(); opt.step(); opt.zero_grad()
    sd, osd = full_state_dict(model), full_optimizer_state_dict(opt, model)
    if dist.get_rank() == 0: torch.save(dict(model=sd, optim=osd), path)
    with torch.no_grad(): return model(_batches()[1][0])


def _two_steps_one_process():
    ref = _gpt(); ropt = build_optimizer(ref.param_groups())
    for xb, yb in _batches()[:2]: ref(xb, yb).backward(); ropt.step(); ropt.zero_grad()
    return ref.state_dict()


def _resume(path, tp, sp, rsd=None):
    """Load at `tp` (1 = the plain GPT), check the logits, take the second step; compare with one process's 2 steps."""
    _fp64()
    rsd = rsd or _two_steps_one_process()
    ck = torch.load(path)
    model = _gpt(seed=123)                                              # different weights until loaded
    if tp > 1: model = parallelize(model, init_mesh(tp=tp), sp=sp)
    opt = tensor_parallel_optimizer(build_optimizer(model.param_groups()))
    (load_full_state_dict if tp > 1 else GPT.load_state_dict)(model, ck["model"])
    load_full_optimizer_state_dict(opt, model, ck["optim"])
    assert all(torch.equal(full_state_dict(model)[k], v) for k, v in ck["model"].items())   # the round trip is exact
    with torch.no_grad(): logits = model(_batches()[1][0])
    xb, yb = _batches()[1]
    model(xb, yb).backward(); opt.step(); opt.zero_grad()
    sd = full_state_dict(model)
    return logits, max((sd[k] - rsd[k]).abs().max().item() for k in rsd)


def _load_run(path, tp):
    _fp64()
    rsd = _two_steps_one_process()
    return [_resume(path, tp, sp, rsd) for sp in (False, True)]


def test_checkpoint_across_tp(tmp_path):
    """Saved at tp=2 + sp after one step (model and optimizer, gathered); loaded at tp=4, tp=4 + sp and into a plain
    GPT (tp=1): identical logits, and the next step lands where one process's two steps do."""
    path = tmp_path / "tp2.pt"
    logits2 = run_distributed(_save_run, 2, path)[0]
    results = [r for per_rank in run_distributed(_load_run, 4, path, 4) for r in per_rank]
    results += run_distributed(_resume, 1, path, 1, False)
    for logits, diff in results:
        torch.testing.assert_close(logits, logits2, **TOL)
        assert diff < 1e-5, diff


def _errors():
    msgs = []
    for fn in (lambda: parallelize(build_model(GPTConfig(**{**CFG, "n_kv_head": 1}), "cpu"), tp_group=dist.group.WORLD),
               lambda: parallelize(parallelize(_gpt(), tp_group=dist.group.WORLD), tp_group=dist.group.WORLD)):
        try: fn(); msgs.append("")
        except ValueError as e: msgs.append(str(e))
    m = parallelize(_gpt(), tp_group=dist.group.WORLD)
    try: load_full_state_dict(m, {**full_state_dict(m), "wte.weight": torch.zeros(5, CFG["n_embd"])}); msgs.append("")
    except ValueError as e: msgs.append(str(e))
    return msgs


def test_errors():
    for msgs in run_distributed(_errors, 2):
        assert "n_kv_head" in msgs[0] and "already" in msgs[1] and "full size" in msgs[2], msgs


def _dtensor_run(sp, T_):
    from torch.distributed.tensor import DTensor
    from nanolit.parallel.tensor_parallel import loss_context, parallelize_dtensor
    _fp64()
    mesh = init_mesh(tp=dist.get_world_size())
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, CFG["vocab_size"], (B, T_), generator=g), torch.randint(0, CFG["vocab_size"], (B, T_), generator=g))
               for _ in range(STEPS)]
    out = {}
    for style in ("hand", "dtensor"):
        model = (parallelize if style == "hand" else parallelize_dtensor)(_gpt(), mesh, sp=sp)
        opt = tensor_parallel_optimizer(build_optimizer(model.param_groups()))
        losses = []
        for xb, yb in batches:
            with loss_context(model):
                loss = model(xb, yb); loss.backward()
            opt.step(); opt.zero_grad()
            losses.append((loss.full_tensor() if isinstance(loss, DTensor) else loss).detach().double())
        with torch.no_grad(): logits = model(batches[0][0])
        out[style] = (torch.stack(losses), {**full_state_dict(model), **full_optimizer_state_dict(opt, model)},
                      logits.full_tensor() if isinstance(logits, DTensor) else logits)
    return out


@pytest.mark.parametrize("world,sp,T_", [(2, True, 12), (4, False, 11)])
def test_dtensor_matches_hand_built(world, sp, T_):
    """parallelize_dtensor (parallelize_module plans, loss_parallel) == parallelize: losses, parameters and optimizer
    state after 3 steps, logits."""
    for out in run_distributed(_dtensor_run, world, sp, T_):
        (lh, sdh, zh), (ld, sdd, zd) = out["hand"], out["dtensor"]
        torch.testing.assert_close(ld, lh, **TOL); torch.testing.assert_close(zd, zh, **TOL)
        for k in sdh: torch.testing.assert_close(sdd[k], sdh[k], **TOL, msg=lambda m: f"{k}: {m}")


MAX_NORM = 0.05


def _clip_run(tp, sp):
    """One backward at tp (dp = world / tp) for each tensor-parallel path and each clip entry point: the global norm
    and the clipped gradients gathered to full shapes, next to one process's torch.nn.utils.clip_grad_norm_."""
    from nanolit.parallel.data_parallel import clip_grad_norm_
    from nanolit.parallel.tensor_parallel import _full_like_param, loss_context, parallelize_dtensor
    _fp64()
    mesh = init_mesh(tp=tp)
    dp, dpr = mesh.size("dp"), mesh.local_rank("dp")
    g = torch.Generator().manual_seed(1)
    xb, yb = (torch.randint(0, CFG["vocab_size"], (B, 12), generator=g) for _ in range(2))   # DTensor sp: T % tp == 0
    ref = _gpt(); ref(xb, yb).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), MAX_NORM)
    out = dict(ref=(ref_norm, {n: p.grad.clone() for n, p in ref.named_parameters()}))
    n = B // dp
    for style, build in (("hand", parallelize), ("dtensor", parallelize_dtensor)):
        for name, clip in (("tp", lambda ps: clip_grad_norm_tp_(ps, MAX_NORM, mesh.group("tp"))),
                           ("dp", lambda ps: clip_grad_norm_(ps, MAX_NORM))):
            model = build(_gpt(), mesh, sp=sp)
            with loss_context(model): model(xb[dpr * n:(dpr + 1) * n], yb[dpr * n:(dpr + 1) * n]).backward()
            if dp > 1: allreduce_gradients(model.parameters(), mesh.group("dp"))
            norm = clip(list(model.parameters()))
            out[f"{style}/{name}"] = (norm, {k: _full_like_param(p.grad, p) for k, p in model.named_parameters()})
    return out


@pytest.mark.parametrize("world,tp,sp", [(2, 2, False), (2, 2, True), (4, 2, False), (4, 2, True)])
def test_clip_grad_norm_both_tp_paths(world, tp, sp):
    """clip_grad_norm_tp_ and 06b's clip_grad_norm_ on `parallelize` and `parallelize_dtensor` models (tp, dp x tp,
    with and without sp): the global norm and the clipped gradients equal one process's (each replica counted once;
    the DTensor embedding gradient is Replicate although its weight is Shard(0))."""
    for out in run_distributed(_clip_run, world, tp, sp):
        ref_norm, ref_grads = out.pop("ref")
        assert ref_norm > 4 * MAX_NORM                      # the clip is active
        for what, (norm, grads) in out.items():
            torch.testing.assert_close(norm, ref_norm, **TOL, msg=lambda m: f"{what} norm: {m}")
            assert set(grads) == set(ref_grads), what
            for k in ref_grads: torch.testing.assert_close(grads[k], ref_grads[k], **TOL, msg=lambda m: f"{what} {k}: {m}")
