"""Second break-it pass, session 8: each bad input gets one clear line (or, for a damaged checkpoint, a warning)."""
import os
import subprocess
import sys

import pytest

from nanolit.train import TrainConfig, train

SMALL = dict(depth=1, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, loader_buffer=8, num_iterations=4, total_batch_size=64)
H100 = dict(plan=True, gpu="h100", world_size=8, vocab_size=65536, head_dim=128, sequence_len=2048,
            total_batch_size=524288)


def test_warmup_longer_than_the_run_is_refused(tiny_base_dir, monkeypatch):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    with pytest.raises(ValueError, match="--warmup-steps 100: must be below the run's 4 steps"):
        train(TrainConfig(tag="warm", warmup_steps=100, **SMALL))


def test_an_absurd_depth_is_refused_at_once(tiny_base_dir, monkeypatch):
    "--depth 100000 used to hang building millions of meta modules for the memory trace; a closed-form floor refuses it."
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    with pytest.raises(ValueError, match="--depth 100000.* MLP weights alone take .* choose a smaller --depth"):
        train(TrainConfig(tag="deep", **{**SMALL, "depth": 100000}))


def test_plan_advice_fits_the_case():
    with pytest.raises(ValueError, match="state alone take .*shard them with --dp-mode fsdp2"):
        train(TrainConfig(depth=100, device_batch_size=1, dp_mode="zero2", **H100))
    with pytest.raises(ValueError, match="at one row per device: lower --sequence-len"):
        train(TrainConfig(depth=70, device_batch_size=1, dp_mode="fsdp2", **H100))


def test_bad_dtype_env_is_one_line(tmp_path):
    env = {**os.environ, "NANOLIT_DTYPE": "garbage", "NANOLIT_BASE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "nanolit.train", "--depth", "1"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    assert lines == ["error: NANOLIT_DTYPE must be one of ['bf16', 'bfloat16', 'float16', 'float32', 'float64', "
                     "'fp16', 'fp32', 'fp64'] (any case), got 'garbage'"], lines


def test_a_damaged_newer_checkpoint_is_named_on_resume(tiny_base_dir, monkeypatch, capsys):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    kw = dict(tag="damaged", save_every=2, keep_last=5, **SMALL)
    train(TrainConfig(stop_after=3, **kw))          # checkpoints at steps 2 and 3
    d = tiny_base_dir / "checkpoints" / "base" / "damaged" / "step_000003"
    f = max((p for p in d.iterdir() if p.is_file() and p.name != "COMPLETE"), key=lambda p: p.stat().st_size)
    with open(f, "r+b") as h:
        h.truncate(f.stat().st_size // 2)
    capsys.readouterr()
    res = train(TrainConfig(resume="true", **kw))
    out = capsys.readouterr().out
    assert "warning: skipped step_000003" in out and "resuming from step 2" in out, out
    assert len(res["history"]["train"]) == 4
