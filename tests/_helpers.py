"""Shared test helpers (not a test module)."""
import os
from contextlib import contextmanager

import torch


@contextmanager
def fp64(base):
    """Run `nanolit` training code in float64 with NANOLIT_BASE_DIR=`base`, restoring everything afterwards.

    fp32 rounding differs between one whole matrix and its gathered shards (or between one process and a sum over
    ranks), and Adam's tiny eps (1e-10) and Muon's Newton-Schulz amplify it: with the zero-initialised projections of a
    fresh model some gradients are near 0 at step 1, where Adam turns that noise into +-lr steps. So the equality tests
    of parallel training compare only the algebra, in fp64: NANOLIT_DTYPE=float64, the default dtype, Muon's
    Newton-Schulz in fp64 (`nanolit.optim._ns_dtype`), and `Tensor.float()` keeping fp64 tensors fp64 (the models cast
    logits to fp32 for the loss)."""
    import nanolit.optim
    old_ns, old_base, old_float = nanolit.optim._ns_dtype, os.environ.get("NANOLIT_BASE_DIR"), torch.Tensor.float
    old_dtype = os.environ.get("NANOLIT_DTYPE")
    nanolit.optim._ns_dtype = lambda G: torch.float64 if G.dtype == torch.float64 else torch.float32
    torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else old_float(self, *a, **k)
    os.environ["NANOLIT_BASE_DIR"] = str(base); os.environ["NANOLIT_DTYPE"] = "float64"
    torch.set_default_dtype(torch.float64)
    try: yield
    finally:
        torch.set_default_dtype(torch.float32)
        nanolit.optim._ns_dtype = old_ns; torch.Tensor.float = old_float
        for k, v in (("NANOLIT_BASE_DIR", old_base), ("NANOLIT_DTYPE", old_dtype)):
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v


def train_fp64(base, tag, **cfg):
    """`nanolit.train.train(TrainConfig(tag=tag, **cfg))` under `fp64(base)`: (per-step losses, final full state dict or
    None if stopped). The losses are all-reduced and the checkpoint is one file, so both are the same on every rank by
    construction; what each rank holds itself is checked here: its weights equal the other data-parallel replicas'
    bit for bit (`replica_max_diff`, from every replica's own parameters)."""
    from nanolit.checkpoint import load_checkpoint
    from nanolit.train import TrainConfig, train
    with fp64(base): res = train(TrainConfig(tag=tag, **cfg))
    losses = [h["loss"] for h in res["history"]["train"]]
    if "stopped_at" in res: return losses, None
    assert res["replica_max_diff"] == 0.0, f"data-parallel replicas diverged by {res['replica_max_diff']}"
    sd, _, _ = load_checkpoint(res["checkpoint"], load_optim=False)
    return losses, sd


def assert_same_run(out, ref, atol=1e-5, rtol=1e-5):
    "Two `train_fp64` results agree: losses, and every tensor of the saved model (float64, same shape) within the tolerance."
    (losses, sd), (ref_losses, ref_sd) = out, ref
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=atol, rtol=rtol)
    assert sd.keys() == ref_sd.keys()
    for k in ref_sd:
        assert sd[k].dtype == torch.float64 and sd[k].shape == ref_sd[k].shape, k
        torch.testing.assert_close(sd[k], ref_sd[k], atol=atol, rtol=rtol, msg=lambda m: f"{k}: {m}")
