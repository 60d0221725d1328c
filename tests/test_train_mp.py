"""`train` with the newer mesh dimensions equals one process (forked gloo ranks, fp64 on CPU, 3 optimizer steps, global
grad-norm clipping on, tolerance 1e-5):

- pipeline parallel (#8): pp=2 (GPipe, accumulation 2), pp2 x dp2 (1F1B), pp2 x tp2 (hand-written 1F1B, accumulation 2);
  a checkpoint written at pp=2 resumes at pp=1 and at pp=4, and loads into a plain model with the same outputs;
- expert parallel (#9): a MoE GPT at ep=2 equals the same MoE GPT on one process; a checkpoint written at ep=2 resumes at
  ep=1 and ep=4;
- context parallel (#9): cp=2 equals one process; a checkpoint written at cp=2 resumes on one process;
- the recipe pieces of 04 (smear, backout, q gain, input-dependent value-embedding gates, Canon layers A-D) all on,
  at tp2 + sp, pp2 x tp2 and cp2 (#16).

fp64 for the reason given in tests/_helpers.py (summation-order noise amplified by Adam's tiny eps and Muon)."""
import os
import shutil

import pytest
import torch

from nanolit.checkpoint import list_checkpoints, load_checkpoint
from nanolit.parallel.mesh import run_distributed
from nanolit.train import TrainConfig, train
from _helpers import assert_same_run, fp64, train_fp64

# depth 4 so that pp=4 has a layer per stage; width 128 = 4 heads of 32, so tp=2 splits heads whole
SMALL = dict(depth=4, aspect_ratio=32, head_dim=32, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256,
             progress=False, sample_every=-1, loader_buffer=8, num_iterations=3, grad_clip=0.5,
             x0_beta1=0.96, resid_lr_frac=0.01)  # the residual scalars in AdamW groups of their own, on every stage
MOE = dict(moe_experts=4, moe_top_k=2, moe_hidden=64)
BT = SMALL["device_batch_size"] * SMALL["sequence_len"]
TOL = dict(atol=1e-5, rtol=1e-5)


def _train(base, tag, **kw):
    return train_fp64(base, tag, **{**SMALL, **kw})   # why fp64: tests/_helpers.py


_REF = {}
def _ref(base, slots, **kw):
    "One process, the same total batch (slots = data ranks x accumulation)."
    key = (slots, tuple(sorted(kw.items())))
    if key not in _REF:
        _REF[key] = _train(base, f"mpref_{len(_REF)}", total_batch_size=BT * slots, **kw)
    return _REF[key]


_close = assert_same_run


@pytest.mark.parametrize("world,pp,tp,accum,schedule", [(2, 2, 1, 2, "gpipe"), (4, 2, 1, 1, "1f1b"), (4, 2, 2, 2, "hand_1f1b")])
def test_pp_equals_single_process(tiny_base_dir, world, pp, tp, accum, schedule):
    dp = world // (pp * tp)
    ref = _ref(tiny_base_dir, dp * accum)
    outs = run_distributed(_train, world, tiny_base_dir, f"pp_{world}_{pp}_{tp}_{accum}", pp=pp, tp=tp, pp_schedule=schedule,
                           total_batch_size=BT * dp * accum, timeout=400)
    for out in outs: _close(out, ref)   # all-reduced losses and one saved model; each rank's own weights: train_fp64


def test_pp_checkpoint_resumes_at_other_pp_and_loads_plain(tiny_base_dir):
    ref = _ref(tiny_base_dir, 1)
    base = tiny_base_dir / "checkpoints" / "base"
    run_distributed(_train, 2, tiny_base_dir, "pp2_stop", pp=2, stop_after=2, timeout=400)
    assert list_checkpoints(base / "pp2_stop") == [2]
    shutil.copytree(base / "pp2_stop", base / "pp2_stop_b")
    from nanolit.checkpoint import load_model           # a plain model from the pipeline checkpoint: every stage's weights
    with fp64(tiny_base_dir):
        m_pp, _, meta = load_model("base", "pp2_stop", 2, device="cpu")
    assert meta["pp"] == 2
    _close(_train(tiny_base_dir, "pp2_stop", resume="true"), ref)          # pp=1, one process
    for out in run_distributed(_train, 4, tiny_base_dir, "pp2_stop_b", pp=4, pp_schedule="hand_1f1b", resume="true",
                               timeout=400): _close(out, ref)
    # the plain model holds the step-2 weights: one more forward equals a pp=1 run stopped at step 2
    _train(tiny_base_dir, "pp1_stop", stop_after=2)
    with fp64(tiny_base_dir):
        m_1, _, _ = load_model("base", "pp1_stop", 2, device="cpu")
    idx = torch.randint(0, meta["model_config"]["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(): torch.testing.assert_close(m_pp(idx), m_1(idx), **TOL)


def test_ep_equals_single_process_and_reshards(tiny_base_dir):
    ref = _ref(tiny_base_dir, 2, **MOE)
    for out in run_distributed(_train, 2, tiny_base_dir, "ep2", ep=2, **MOE, timeout=400): _close(out, ref)
    base = tiny_base_dir / "checkpoints" / "base"
    run_distributed(_train, 2, tiny_base_dir, "ep2_stop", ep=2, stop_after=2, **MOE, timeout=400)
    shutil.copytree(base / "ep2_stop", base / "ep2_stop_b")
    _close(_train(tiny_base_dir, "ep2_stop", resume="true", total_batch_size=2 * BT, **MOE), ref)   # ep=1, accum 2
    ref4 = _ref(tiny_base_dir, 4, **MOE)
    run_distributed(_train, 2, tiny_base_dir, "ep2_stop4", ep=2, stop_after=2, total_batch_size=4 * BT, **MOE, timeout=400)
    for out in run_distributed(_train, 4, tiny_base_dir, "ep2_stop4", ep=4, resume="true", total_batch_size=4 * BT, **MOE,
                               timeout=400): _close(out, ref4)
    with pytest.raises(ValueError, match="MoE settings"):
        _train(tiny_base_dir, "ep2_stop_b", resume="true", total_batch_size=2 * BT, **{**MOE, "moe_experts": 8})


def test_cp_equals_single_process(tiny_base_dir):
    ref = _ref(tiny_base_dir, 1)
    for out in run_distributed(_train, 2, tiny_base_dir, "cp2", cp=2, timeout=400): _close(out, ref)
    run_distributed(_train, 2, tiny_base_dir, "cp2_stop", cp=2, stop_after=2, timeout=400)
    _close(_train(tiny_base_dir, "cp2_stop", resume="true"), ref)


# 04's recipe pieces all on: smear and Canon A-D read earlier positions (a halo under cp, a replica's summed gradient
# under tp), backout carries the half-depth residual between pipeline stages, q_gain splits with the heads, and a
# padded head's extra columns are masked in the vocab-parallel loss
PIECES = dict(smear=True, backout=True, qk_gain=True, ve_gate_input=True, canon="ABCD", pad_vocab_to=64)  # head 400 -> 448


@pytest.mark.parametrize("kw", [dict(tp=2, sp=True), dict(pp=2, tp=2, pp_schedule="hand_1f1b"), dict(cp=2)],
                         ids=["tp2+sp", "pp2xtp2", "cp2"])
def test_recipe_pieces_equal_single_process_at_every_layout(tiny_base_dir, kw):
    world = kw.get("tp", 1) * kw.get("pp", 1) * kw.get("cp", 1)
    ref = _ref(tiny_base_dir, 1, **PIECES)
    for out in run_distributed(_train, world, tiny_base_dir, "pieces_" + "_".join(f"{k}{v}" for k, v in kw.items()),
                               **kw, **PIECES, timeout=400):
        _close(out, ref)


def test_recipe_pieces_equal_single_process_under_ep(tiny_base_dir):
    "ep2 with every piece a MoE model takes: Canon A and B (C and D sit in the dense MLP, refused with experts)."
    pieces = {**PIECES, "canon": "AB"}
    ref = _ref(tiny_base_dir, 2, **MOE, **pieces)
    for out in run_distributed(_train, 2, tiny_base_dir, "pieces_ep2", ep=2, **MOE, **pieces, timeout=400):
        _close(out, ref)


@pytest.mark.parametrize("kw", [dict(ep=2, **MOE), dict(cp=2)], ids=["ep2xdp2", "cp2xdp2"])
def test_composes_with_dp_at_world_4(tiny_base_dir, kw):
    "ep2 x dp2 reads 4 batches (data ranks = dp x ep), cp2 x dp2 reads 2: the same total batch as one process."
    slots = 4 if "ep" in kw else 2
    ref = _ref(tiny_base_dir, slots, **{k: v for k, v in kw.items() if k not in ("ep", "cp")})
    for out in run_distributed(_train, 4, tiny_base_dir, f"dp2_{'_'.join(kw)}", total_batch_size=BT * slots, **kw, timeout=400):
        _close(out, ref)


def _val(base, tag, **kw):
    with fp64(base): res = train(TrainConfig(tag=tag, **{**SMALL, "eval_every": 3, **kw}))
    return [h["bpb"] for h in res["history"]["val"]]


def test_val_bpb_is_the_same_at_any_layout(tiny_base_dir):
    "The val batches are one stream dealt to the data ranks: dp 2 scores the same tokens as one process (step 0 and 3)."
    ref = _val(tiny_base_dir, "val_ref", total_batch_size=2 * BT)
    for v in run_distributed(_val, 2, tiny_base_dir, "val_dp2", timeout=300):
        torch.testing.assert_close(torch.tensor(v), torch.tensor(ref), **TOL)
