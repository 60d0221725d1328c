"""fp16 training on a CPU through `train`: torch's GradScaler scales the loss, a step whose scaled gradients overflow
is skipped and the scale backs off, and the run ends with finite losses; the sharded rungs refuse fp16 before
anything is built (11_train's `loss_scaler`)."""
import functools
import os

import pytest
import torch

import nanolit.train
from nanolit.train import TrainConfig, train

SMALL = dict(depth=1, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, loader_buffer=8, num_iterations=4, total_batch_size=64)


@pytest.fixture
def fp16(tiny_base_dir, monkeypatch):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    monkeypatch.setenv("NANOLIT_DTYPE", "fp16")


def _losses(res): return [h["loss"] for h in res["history"]["train"]]


def test_fp16_trains_with_a_loss_scale(fp16):
    res = train(TrainConfig(tag="fp16", **SMALL))
    assert res["loss_scale"] == 2.0**16              # torch's initial scale; no overflow in 4 steps
    assert all(torch.isfinite(torch.tensor(_losses(res))))


def test_fp16_overflow_skips_steps_and_backs_off(fp16, monkeypatch):
    # a scale of 2**40 overflows fp16 in backward: each such step is skipped and the scale halves until it fits
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=2.0**40))
    res = train(TrainConfig(tag="fp16_overflow", **SMALL))
    assert res["loss_scale"] < 2.0**40
    assert all(torch.isfinite(torch.tensor(_losses(res))))


def test_fp16_refused_where_gradients_are_sharded(fp16):
    with pytest.raises(ValueError, match="fp16 needs a loss scaler over whole gradients"):
        train(TrainConfig(tag="fp16_zero", dp_mode="zero2", **SMALL))
