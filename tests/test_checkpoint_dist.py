"""Every data-parallel mode of `train` equals one process with the same total batch; ranks never diverge; uneven row
groups don't hang; a DCP checkpoint resumes at another world size and layout (forked gloo ranks, fp64 on CPU)."""
import json
import os

import pytest
import torch

from nanolit.checkpoint import load_checkpoint, list_checkpoints
from nanolit.parallel.mesh import run_distributed
from nanolit.train import TrainConfig, train

SMALL = dict(depth=2, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, loader_buffer=8)
CLIP = 0.5
BT = SMALL["device_batch_size"] * SMALL["sequence_len"]


def _train(base, tag, **kw):
    # float64 for the same reason as tests/test_train_dist.py: Adam's tiny eps turns fp32 cancellation residue of
    # order 1e-9 into +-lr steps whose sign depends on the summation order (which differs between 1 and W ranks).
    # Muon's Newton-Schulz runs in fp32 on the CPU whatever the parameters' dtype; it amplifies the rounding in the
    # near-null directions of low-rank early gradients (~5 quintic steps, slope 3.4 each), and FSDP2's sharded DTensor
    # matmuls round differently from one whole matrix. In fp64 that noise is gone and only data parallelism is compared.
    import nanolit.optim
    old_ns, old_base = nanolit.optim._ns_dtype, os.environ.get("NANOLIT_BASE_DIR")   # both restored below
    nanolit.optim._ns_dtype = lambda G: torch.float64 if G.dtype == torch.float64 else torch.float32
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    os.environ["NANOLIT_DTYPE"] = "float64"
    torch.set_default_dtype(torch.float64)
    try:
        res = train(TrainConfig(tag=tag, **{**SMALL, **kw}))
    finally:
        torch.set_default_dtype(torch.float32); os.environ.pop("NANOLIT_DTYPE", None)
        nanolit.optim._ns_dtype = old_ns
        if old_base is None: os.environ.pop("NANOLIT_BASE_DIR", None)
        else: os.environ["NANOLIT_BASE_DIR"] = old_base
    losses = [h["loss"] for h in res["history"]["train"]]
    if "stopped_at" in res: return losses, None, None
    sd, _, meta = load_checkpoint(res["checkpoint"], load_optim=False)
    return losses, sd, res["replica_max_diff"]


_REF = {}
def _ref(base, slots, steps=3):
    if (slots, steps) not in _REF:
        _REF[slots, steps] = _train(base, f"ref_{slots}_{steps}", total_batch_size=BT * slots, num_iterations=steps,
                                     grad_clip=CLIP)
    return _REF[slots, steps]


def _close(sd, ref_sd, losses, ref_losses):
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for k in ref_sd:
        assert sd[k].dtype == torch.float64
        torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-5, rtol=1e-5, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("mode,world,accum", [("ddp", 2, 1), ("ddp", 2, 2), ("zero1", 2, 2), ("zero1", 4, 1),
                                              ("zero2", 2, 2), ("zero2", 4, 1), ("fsdp2", 2, 1), ("fsdp2", 2, 2)])
def test_dp_mode_equals_single_process(tiny_base_dir, mode, world, accum):
    ref_losses, ref_sd, _ = _ref(tiny_base_dir, world * accum)
    outs = run_distributed(_train, world, tiny_base_dir, f"{mode}_{world}_{accum}", dp_mode=mode,
                           total_batch_size=BT * world * accum, num_iterations=3, grad_clip=CLIP, timeout=300)
    for losses, sd, diff in outs:
        assert diff == 0.0                       # replicas bit-identical
        _close(sd, ref_sd, losses, ref_losses)


def test_uneven_row_groups_do_not_hang(tmp_path, tiny_base_dir):
    # 5 row groups over 2 slots: slot 0 gets 3, slot 1 gets 2, so slot 1 starts its second epoch first
    from nanolit.core import sample_texts
    from nanolit.data import write_shards
    import shutil
    shutil.copytree(tiny_base_dir / "tokenizer", tmp_path / "tokenizer")
    docs = [p for p in sample_texts()["sonnets"].split("\n\n") if p.strip()][:10]
    write_shards(docs, tmp_path / "data", "train", row_group_size=2)
    write_shards(docs[:4], tmp_path / "data", "val", row_group_size=2)
    import pyarrow.parquet as pq
    assert sum(pq.ParquetFile(f).num_row_groups for f in (tmp_path / "data").glob("train*.parquet")) == 5
    outs = run_distributed(_train, 2, tmp_path, "uneven", dp_mode="zero1", num_iterations=8, timeout=300)
    assert [len(o[0]) for o in outs] == [8, 8]
    meta = json.loads(next((tmp_path / "checkpoints" / "base" / "uneven").glob("step_000008/meta.json")).read_text())
    epochs = [s["heads"]["next_pos"][0] for s in meta["loader_states"]]  # the default loader's head stream
    assert epochs[1] > epochs[0], epochs           # the short slot really wrapped around more often


@pytest.mark.parametrize("save,load", [((2, 1, "zero1"), (1, 2, "naive")), ((2, 2, "zero1"), (4, 1, "fsdp2")),
                                       ((4, 1, "zero2"), (2, 2, "zero1")), ((2, 1, "naive"), (2, 1, "zero2"))])
def test_resume_at_other_world_and_layout(tiny_base_dir, save, load):
    (w1, a1, m1), (w2, a2, m2) = save, load
    slots = w1 * a1
    ref_losses, ref_sd, _ = _ref(tiny_base_dir, slots, steps=4)
    tag = f"reshard_{w1}{a1}{m1}_{w2}{a2}{m2}"
    kw = dict(total_batch_size=BT * slots, num_iterations=4, grad_clip=CLIP)
    run_distributed(_train, w1, tiny_base_dir, tag, dp_mode=m1, stop_after=2, **kw, timeout=300)
    assert list_checkpoints(tiny_base_dir / "checkpoints" / "base" / tag) == [2]
    if w2 == 1: outs = [_train(tiny_base_dir, tag, dp_mode=m2, resume="true", **kw)]
    else: outs = run_distributed(_train, w2, tiny_base_dir, tag, dp_mode=m2, resume="true", **kw, timeout=300)
    for losses, sd, diff in outs:
        assert diff == 0.0
        _close(sd, ref_sd, losses, ref_losses)


def test_resume_with_other_slot_count_is_a_clear_error(tiny_base_dir):
    kw = dict(total_batch_size=BT * 2, num_iterations=4)
    run_distributed(_train, 2, tiny_base_dir, "slots", stop_after=2, **kw, timeout=300)
    with pytest.raises(ValueError, match=rf"trained {BT * 2:,} tokens a step in 2 data shards, this run would take "
                       rf"{BT * 4:,} in 4; resume with --total-batch-size {BT * 2} --device-batch-size"):
        _train(tiny_base_dir, "slots", resume="true", total_batch_size=BT * 4, num_iterations=4)
