"""`train(--tp N)` equals one process: tensor parallel (world 2), dp2 x tp2 with and without sequence parallel (world
4), after 3 steps; a checkpoint written at tp=2 resumes at tp=1 and tp=4 and loads into a plain model (chat's
`load_model`) with the same outputs (forked gloo ranks, fp64 on CPU)."""
import os
import shutil

import pytest
import torch

from nanolit.checkpoint import list_checkpoints, load_checkpoint
from nanolit.parallel.mesh import run_distributed
from nanolit.train import TrainConfig, train
from _helpers import assert_same_run, fp64, train_fp64

# head_dim 32 at depth 2: n_embd 128, 4 heads, so tp 4 splits the heads whole
SMALL = dict(depth=2, head_dim=32, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, loader_buffer=8, num_iterations=3, grad_clip=0.5,
             x0_beta1=0.96, resid_lr_frac=0.01)  # the residual scalars in AdamW groups of their own (replicated)
BT = SMALL["device_batch_size"] * SMALL["sequence_len"]


def _train(base, tag, **kw):
    return train_fp64(base, tag, **{**SMALL, **kw})   # why fp64: tests/_helpers.py


_REF = {}
def _ref(base, slots):
    "One process, the same total batch (slots = dp size), a step-2 checkpoint kept too."
    if slots not in _REF:
        _REF[slots] = _train(base, f"tpref_{slots}", total_batch_size=BT * slots, save_every=2)
    return _REF[slots]


_close = assert_same_run


@pytest.mark.parametrize("world,tp,sp", [(2, 2, False), (4, 2, False), (4, 2, True)])
def test_tp_equals_single_process(tiny_base_dir, world, tp, sp):
    dp = world // tp
    ref = _ref(tiny_base_dir, dp)
    outs = run_distributed(_train, world, tiny_base_dir, f"tp_{world}_{tp}_{sp}", tp=tp, sp=sp,
                           total_batch_size=BT * dp, timeout=300)
    for out in outs: _close(out, ref)   # all-reduced losses and one saved model; each rank's own weights: train_fp64


def test_tp_checkpoint_resumes_at_other_tp_and_loads_plain(tiny_base_dir):
    ref = _ref(tiny_base_dir, 1)
    base = tiny_base_dir / "checkpoints" / "base"
    run_distributed(_train, 2, tiny_base_dir, "tp2_stop", tp=2, stop_after=2, timeout=300)
    assert list_checkpoints(base / "tp2_stop") == [2]
    shutil.copytree(base / "tp2_stop", base / "tp2_stop_b")
    shutil.copytree(base / "tp2_stop", base / "tp2_stop_c")
    # plain model from the tp checkpoint (chat's loader): the same outputs as the one-process run's step-2 model
    from nanolit.checkpoint import load_model
    old = os.environ.get("NANOLIT_BASE_DIR"); os.environ["NANOLIT_BASE_DIR"] = str(tiny_base_dir)
    try:
        m_tp, _, meta = load_model("base", "tp2_stop", 2, device="cpu")
        m_ref, _, _ = load_model("base", "tpref_1", 2, device="cpu")
    finally:
        if old is None: os.environ.pop("NANOLIT_BASE_DIR", None)
        else: os.environ["NANOLIT_BASE_DIR"] = old
    assert meta["tp"] == 2
    idx = torch.randint(0, meta["model_config"]["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(): torch.testing.assert_close(m_tp(idx), m_ref(idx), atol=1e-4, rtol=1e-4)
    # resume at tp=1 (one process) and at tp=4 (world 4): the last step equals the straight one-process run
    _close(_train(tiny_base_dir, "tp2_stop_b", resume="true"), ref)
    for out in run_distributed(_train, 4, tiny_base_dir, "tp2_stop_c", tp=4, resume="true", timeout=300): _close(out, ref)


def test_tp_is_naive_dp_only_and_sp_needs_tp(tiny_base_dir):
    with pytest.raises(ValueError, match="only naive"): _train(tiny_base_dir, "tp_bad", tp=2, dp_mode="zero1")
    with pytest.raises(ValueError, match="needs --tp"): _train(tiny_base_dir, "tp_bad", sp=True)


def _tiny_sft_base(base, tag="tiny_sft_tp", T=64):
    "A perturbed random-init tiny base checkpoint (zero-init projections would hide bugs), built once per session."
    from dataclasses import asdict
    from nanolit.checkpoint import checkpoint_dir, save_checkpoint
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import get_tokenizer
    old = os.environ.get("NANOLIT_BASE_DIR"); os.environ["NANOLIT_BASE_DIR"] = str(base)
    try:
        d = checkpoint_dir("base", tag)
        if not list_checkpoints(d):
            gc = GPTConfig(sequence_len=T, vocab_size=get_tokenizer().vocab_size, n_layer=2, n_head=2, n_kv_head=2, n_embd=32)
            torch.manual_seed(0); m = build_model(gc, "cpu")
            with torch.no_grad():
                for p in m.parameters(): p.add_(0.02 * torch.randn_like(p))
            save_checkpoint(d, 0, m.state_dict(), None, dict(model_config=asdict(gc), config={}))
    finally:
        if old is None: os.environ.pop("NANOLIT_BASE_DIR", None)
        else: os.environ["NANOLIT_BASE_DIR"] = old
    return tag


def _sft(base, run, **kw):
    from nanolit.sft import SFTConfig, sft
    with fp64(base):
        res = sft(SFTConfig(tag=run, source_tag="tiny_sft_tp", sources="identity", device_batch_size=2, total_batch_size=2 * 64,
                            num_iterations=3, eval_every=-1, eval_batches=2, chat_eval_tasks="identity", chat_eval_items=2,
                            progress=False, **kw))
        sd, _, meta = load_checkpoint(res["checkpoint"], load_optim=False)
    h = res["history"]
    return [x["loss"] for x in h["train"]], [x["tokens"] for x in h["train"]], h["val"], res["chat_eval"], sd, meta


def test_sft_tp_equals_single_process(tiny_base_dir):
    _tiny_sft_base(tiny_base_dir)
    ref_l, ref_n, ref_v, ref_rows, ref_sd, _ = _sft(tiny_base_dir, "sft_tp_ref")
    for l, n, v, rows, sd, meta in run_distributed(_sft, 2, tiny_base_dir, "sft_tp2", tp=2, timeout=300):
        assert meta["tp"] == 2 and n == ref_n and rows == ref_rows
        torch.testing.assert_close(torch.tensor(l), torch.tensor(ref_l), atol=1e-6, rtol=1e-6)
        assert [x["tokens"] for x in v] == [x["tokens"] for x in ref_v]
        torch.testing.assert_close(torch.tensor([x["loss"] for x in v]), torch.tensor([x["loss"] for x in ref_v]), atol=1e-6, rtol=1e-6)
        assert sd.keys() == ref_sd.keys()
        for k in ref_sd: torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-6, rtol=1e-6, msg=lambda m: f"{k}: {m}")
