"""Pipeline parallelism of 06d on forked gloo ranks (world 2 and 4): every schedule offered (hand AFAB/1F1B and
torch.distributed.pipelining's GPipe, 1F1B, interleaved 1F1B, looped BFS, interleaved zero-bubble, ZBV) gives the
one-process per micro-batch losses and per-stage gradients; pp x dp at world 4 gives the one-process parameters after
3 MuonAdamW steps with gradient accumulation 1 and 2; a checkpoint (full state dict) saved at pp=2 loads at pp=1 and
pp=4 with identical outputs; pp x tp at world 4 (tp by `parallelize`, sp off) likewise matches after 3 steps.

Loss/gradient checks run in fp32 at 1e-5. The optimizer-step runs are in float64 for the reason given in
tests/test_data_parallel.py (AdamW's eps = 1e-10 turns fp32 summation-order noise on near-zero gradients into +-lr
steps); the model still casts logits to fp32 for the loss. Tolerance 1e-5 throughout."""
import os
import warnings

import pytest
import torch
import torch.distributed as dist

from nanolit.model import GPTConfig, build_model
from nanolit.optim import build_optimizer
from nanolit.parallel.data_parallel import allreduce_gradients
from nanolit.parallel.mesh import init_mesh, run_distributed
from nanolit.parallel.tensor_parallel import parallelize, tensor_parallel_optimizer
from nanolit.parallel.pipeline_parallel import PIPELINE_SCHEDULES, Pipeline, _torch_schedules

warnings.filterwarnings("ignore")
TOL = dict(atol=1e-5, rtol=1e-5)
V, T = 64, 16


def _cfg(n_layer):
    return GPTConfig(sequence_len=T, vocab_size=V, n_layer=n_layer, n_head=4, n_kv_head=2, n_embd=32,
                     window_pattern="SL", short_window=4)


build_model(_cfg(2), "cpu")   # torch's lazy init once in the parent: forked ranks then start in ~0.1 s, not ~4 s


def _model(n_layer, seed=0):
    torch.manual_seed(seed)
    m = build_model(_cfg(n_layer), "cpu")
    with torch.no_grad():   # leave the zero init so every path (x0 mixing, value embeddings, projections) carries signal
        for p in m.parameters(): p.add_(0.1 * torch.randn_like(p))
    return m


def _batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (n, T), generator=g), torch.randint(0, V, (n, T), generator=g)


def _stages_per_rank(schedule):
    return 1 if schedule.startswith("hand_") else _torch_schedules()[schedule][1]


def _grads(pipe):
    return {(k, s.layers.start): p.grad.clone() for s in pipe.stages for k, p in s.named_parameters()}


def _schedule_run(schedule, n_layer, m):
    pipe = Pipeline(_model(n_layer), schedule, dist.get_rank(), dist.get_world_size(), m)
    idx, tgt = _batch(2 * m)
    losses = pipe.step(idx, tgt)
    return losses, _grads(pipe), pipe.mean_loss(losses)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("schedule", PIPELINE_SCHEDULES)
def test_schedule_equals_single_process(world, schedule):
    v = _stages_per_rank(schedule)
    # zero-bubble schedules need one layer per stage (see the notebook); the others get 2 layers per stage where possible
    n_layer = world * v if schedule in ("interleaved_zb", "zbv") else max(4, world * v)
    m = 4
    ref = _model(n_layer)
    idx, tgt = _batch(2 * m)
    ref_losses = torch.stack([ref(i, t) for i, t in zip(idx.chunk(m), tgt.chunk(m))])
    ref_losses.mean().backward()
    ref_grads = {k: p.grad for k, p in ref.named_parameters()}
    outs = run_distributed(_schedule_run, world, schedule, n_layer, m, timeout=120)
    last = [o[0] for o in outs if o[0] is not None]
    assert len(last) == 1
    torch.testing.assert_close(last[0], ref_losses.detach(), **TOL)
    seen = set()
    for _, grads, mean_loss in outs:
        torch.testing.assert_close(mean_loss, ref_losses.mean().detach(), **TOL)
        for (k, start), g in grads.items():
            r = ref_grads[k][start:start + g.numel()] if "lambdas" in k else ref_grads[k]
            torch.testing.assert_close(g, r, **TOL, msg=lambda s: f"{k}: {s}")
            seen.add(k)
    assert seen == set(ref_grads)   # every parameter lives on some stage


STEPS, PP, DP, LOCAL_B, M = 3, 2, 2, 4, 2


def _opt(groups):
    # per-group settings on: the residual scalars in groups of their own, as each stage holds its slice of them
    return build_optimizer(groups, matrix_lr=0.02, embedding_lr=0.2, unembedding_lr=0.004, scalar_lr=0.5,
                           embedding_betas=(0.8, 0.995), unembedding_betas=(0.8, 0.96), resid_lr=0.005,
                           x0_betas=(0.96, 0.95))


def _f64(fn):
    def wrapped(*a, **kw):
        os.environ["NANOLIT_DTYPE"] = "float64"; torch.set_default_dtype(torch.float64)
        try: return fn(*a, **kw)
        finally: torch.set_default_dtype(torch.float32); del os.environ["NANOLIT_DTYPE"]
    return wrapped


def _step_batches(accum, dp=DP):
    "Per optimizer step, the whole batch (dp * accum * LOCAL_B rows) in rank order: dp rank d, accumulation step a."
    return [_batch(dp * accum * LOCAL_B, seed=s + 1) for s in range(STEPS)]


@_f64
def _ppdp_run(schedule, accum):
    mesh = init_mesh(pp=PP)
    pr, dr = mesh.local_rank("pp"), mesh.local_rank("dp")
    pipe = Pipeline(_model(4), schedule, pr, PP, M, group=mesh.group("pp"), ranks=mesh.members("pp"))
    opt = _opt(pipe.param_groups())
    losses = []
    for idx, tgt in _step_batches(accum):
        chunks = list(zip(idx.chunk(DP * accum), tgt.chunk(DP * accum)))[dr * accum:(dr + 1) * accum]
        step_losses = [pipe.mean_loss(pipe.step(i, t, loss_scale=1 / accum)) for i, t in chunks]
        if mesh.size("dp") > 1: allreduce_gradients(pipe.parameters(), mesh.group("dp"))
        opt.step(); opt.zero_grad(set_to_none=True)
        loss = torch.stack(step_losses).mean()
        if mesh.size("dp") > 1: dist.all_reduce(loss, group=mesh.group("dp")); loss /= mesh.size("dp")
        losses.append(loss)
    return torch.stack(losses), pipe.full_state_dict()


@_f64
def _ref_run(accum, dp=DP):
    model = _model(4)
    opt = _opt(model.param_groups())
    losses = []
    for idx, tgt in _step_batches(accum, dp):
        loss = model(idx, tgt); loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses), {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("accum", [1, 2])
@pytest.mark.parametrize("schedule", ["hand_1f1b", "interleaved_1f1b"])
def test_pp_dp_equals_single_process(schedule, accum):
    ref_losses, ref_sd = _ref_run(accum)
    outs = run_distributed(_ppdp_run, PP * DP, schedule, accum, timeout=180)
    for losses, sd in outs:
        torch.testing.assert_close(losses, ref_losses, **TOL)   # the loss from fp64 logits, as the one-process model
        assert sorted(sd) == sorted(ref_sd)
        for k in ref_sd:
            assert sd[k].dtype == torch.float64
            torch.testing.assert_close(sd[k], ref_sd[k], **TOL, msg=lambda s: f"{k}: {s}")


@_f64
def _pptp_run(schedule, accum):
    mesh = init_mesh(pp=PP, tp=2)
    model = parallelize(_model(4), mesh)
    pipe = Pipeline(model, schedule, mesh.local_rank("pp"), PP, M, group=mesh.group("pp"), ranks=mesh.members("pp"))
    opt = tensor_parallel_optimizer(_opt(pipe.param_groups()))
    losses = []
    for idx, tgt in _step_batches(accum, dp=1):
        chunks = list(zip(idx.chunk(accum), tgt.chunk(accum)))
        losses.append(torch.stack([pipe.mean_loss(pipe.step(i, t, loss_scale=1 / accum)) for i, t in chunks]).mean())
        opt.step(); opt.zero_grad(set_to_none=True)
    return torch.stack(losses), pipe.full_state_dict()


@pytest.mark.parametrize("accum", [1, 2])
@pytest.mark.parametrize("schedule", ["hand_1f1b", "1f1b"])
def test_pp_tp_equals_single_process(schedule, accum):
    ref_losses, ref_sd = _ref_run(accum, dp=1)
    outs = run_distributed(_pptp_run, PP * 2, schedule, accum, timeout=180)
    for losses, sd in outs:
        torch.testing.assert_close(losses, ref_losses, **TOL)
        assert sorted(sd) == sorted(ref_sd)
        for k in ref_sd:
            torch.testing.assert_close(sd[k], ref_sd[k], **TOL, msg=lambda s: f"{k}: {s}")


def _save_at_pp2(path):
    pipe = Pipeline(_model(4), "1f1b", dist.get_rank(), 2, 2)
    opt = _opt(pipe.param_groups())
    idx, tgt = _batch(4, seed=7)
    pipe.step(idx, tgt); opt.step()                    # one step, so the weights differ from any fresh init
    sd = pipe.full_state_dict()
    if dist.get_rank() == 0: torch.save(sd, path)
    dist.barrier()
    return sd


def _load_at_pp4(path, n_mb):
    pipe = Pipeline(_model(4, seed=123), "gpipe", dist.get_rank(), 4, n_mb)
    pipe.load_full_state_dict(torch.load(path))
    idx, tgt = _batch(2 * n_mb, seed=9)
    return pipe.step(idx, tgt), pipe.full_state_dict()


def test_checkpoint_pp2_loads_at_pp1_and_pp4(tmp_path):
    path = str(tmp_path / "pp2.pt")
    saved = run_distributed(_save_at_pp2, 2, path)[0]
    sd = torch.load(path)
    for k in sd: torch.testing.assert_close(sd[k], saved[k], atol=0, rtol=0)
    # pp = 1: a plain GPT
    m = _model(4, seed=123)
    m.load_state_dict(sd)
    idx, tgt = _batch(8, seed=9)
    ref = torch.stack([m(i, t) for i, t in zip(idx.chunk(4), tgt.chunk(4))]).detach()
    assert not torch.allclose(ref, torch.stack([_model(4, seed=123)(i, t) for i, t in zip(idx.chunk(4), tgt.chunk(4))]))
    # pp = 4
    outs = run_distributed(_load_at_pp4, 4, path, 4)
    torch.testing.assert_close(outs[-1][0], ref, **TOL)
    for _, sd4 in outs:
        for k in sd: torch.testing.assert_close(sd4[k], sd[k], atol=0, rtol=0)
