"""Data-parallel pretraining equals one process with the same total batch (forked gloo ranks, fp32 on CPU)."""
import os

import pytest
import torch

from nanolit.parallel.mesh import run_distributed
from nanolit.train import TrainConfig, train

SMALL = dict(depth=2, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=512, progress=False,
             num_iterations=3, sample_every=-1)


def _train(base, run, **kw):
    # float64: Adam divides by sqrt(v) + eps (eps = 1e-10), so a gradient element that cancels to ~1e-9 in fp32 turns
    # into a full +-lr step whose sign depends on the summation order, which differs between 1 and W ranks. In fp64
    # the cancellation residue is ~1e-17 and the comparison measures data parallelism, not rounding.
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    os.environ["NANOLIT_DTYPE"] = "float64"
    torch.set_default_dtype(torch.float64)
    res = train(TrainConfig(tag=run, **SMALL, **kw))
    from nanolit.checkpoint import load_checkpoint
    sd, _, _ = load_checkpoint(res["checkpoint"], load_optim=False)
    torch.set_default_dtype(torch.float32); del os.environ["NANOLIT_DTYPE"]
    assert sd["wte.weight"].dtype == torch.float64
    return [h["loss"] for h in res["history"]["train"]], sd, res["replica_max_diff"]


@pytest.mark.parametrize("world,accum", [(2, 1), (2, 2), (4, 1)])
def test_dp_equals_single_process(tiny_base_dir, world, accum):
    total = SMALL["device_batch_size"] * SMALL["sequence_len"] * world * accum
    ref_losses, ref_sd, _ = _train(tiny_base_dir, f"ref_{world}_{accum}", total_batch_size=total)
    outs = run_distributed(_train, world, tiny_base_dir, f"dp_{world}_{accum}", total_batch_size=total, timeout=300)
    losses, sd, _ = outs[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for k in ref_sd:
        torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-5, rtol=1e-5, msg=lambda m: f"{k}: {m}")
    for _, _, diff in outs:          # each rank's own weights, in its memory, equal the other replicas' (not the all-reduced loss)
        assert diff == 0.0


RECIPE = dict(smear=True, backout=True, long_docs="mix", tail_share=0.3, muon_method="polar_express",
              weight_decay=0.1, cautious_wd=True, qk_gain=True, ve_gate_input=True, pad_vocab_to=64,
              embedding_beta2=0.995, unembedding_beta2=0.96, x0_beta1=0.96, resid_lr_frac=0.01,  # own AdamW groups
              muon_momentum_cooldown=2)


@pytest.mark.parametrize("dp_mode,extra", [("naive", dict(normuon=True)), ("zero1", {}), ("zero2", {})])
def test_dp_equals_single_process_with_the_recipe_pieces(tiny_base_dir, dp_mode, extra):
    """Issue 16's pieces on (smear, backout, QK gain, input value-embedding gates, a padded head, the head/tail
    loader, Polar Express, cautious decay, per-group AdamW settings with the residual scalars in groups of their own, a
    momentum cooldown; NorMuon where its state is unsharded): world 2 equals one process with the
    same total batch, float64."""
    total = SMALL["device_batch_size"] * SMALL["sequence_len"] * 2
    kw = dict(total_batch_size=total, **RECIPE, **extra)
    ref_losses, ref_sd, _ = _train(tiny_base_dir, f"ref_recipe_{dp_mode}", **kw)
    assert {"smear_gate", "smear_lambda", "backout_lambda", "blocks.0.attn.q_gain"} <= set(ref_sd)
    head, vocab = ref_sd["lm_head.weight"].shape[0], ref_sd["wte.weight"].shape[0]
    assert head % 64 == 0 and head > vocab and any(v.ndim == 2 for k, v in ref_sd.items() if "ve_gate" in k)
    outs = run_distributed(_train, 2, tiny_base_dir, f"dp_recipe_{dp_mode}", dp_mode=dp_mode, timeout=300, **kw)
    losses, sd, _ = outs[0]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for k in ref_sd:
        torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-5, rtol=1e-5, msg=lambda m: f"{k}: {m}")
    for _, _, diff in outs:
        assert diff == 0.0
