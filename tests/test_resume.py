"""Exact resume after a real SIGKILL: of a training process after its step-4 checkpoint, and of one in the middle of
a save (between writing the DCP shards and the rename), at world 1 (`python -m nanolit.train`) and world 2
(`torch.distributed.run`); the resumed run's losses, parameters, LR multipliers and optimizer-state dtypes equal the
straight run's (fp32 on CPU, the same arithmetic, so exactly)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nanolit.checkpoint import load_checkpoint, list_checkpoints
from nanolit.parallel.mesh import run_distributed
from nanolit.train import TrainConfig, train

SMALL = dict(depth=2, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, num_iterations=8, save_every=2, keep_last=2, loader_buffer=8)
CLI = ["--depth", "2", "--sequence-len", "32", "--device-batch-size", "2", "--eval-every", "-1", "--eval-tokens", "256",
       "--progress", "false", "--num-iterations", "8", "--save-every", "2", "--keep-last", "2", "--loader-buffer", "8"]


def _train(base, tag, **kw):
    old_base = os.environ.get("NANOLIT_BASE_DIR")      # restored: other test files read it in this process
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    try: res = train(TrainConfig(tag=tag, **{**SMALL, **kw}))
    finally:
        if old_base is None: os.environ.pop("NANOLIT_BASE_DIR", None)
        else: os.environ["NANOLIT_BASE_DIR"] = old_base
    sd, osd, meta = load_checkpoint(res["checkpoint"])
    return res["history"]["train"], sd, osd


def _run_and_kill(base, tag, pause, ready, world=1, extra=()):
    "Start training in a subprocess (its own process group), wait until `ready(ckpt_dir)`, then SIGKILL the group."
    env = {**os.environ, "NANOLIT_BASE_DIR": str(base), "OMP_NUM_THREADS": "1", "NANOLIT_DEVICE": "cpu",
           "NANOLIT_CKPT_PAUSE": pause}
    launch = [sys.executable, "-m", "nanolit.train"] if world == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", "-m", "nanolit.train"]
    proc = subprocess.Popen([*launch, "--tag", tag, *CLI, *extra], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    d = Path(base) / "checkpoints" / "base" / tag
    deadline = time.monotonic() + 240
    try:
        while not ready(d):
            if proc.poll() is not None: raise AssertionError(f"training exited early:\n{proc.stdout.read().decode()[-3000:]}")
            if time.monotonic() > deadline: raise TimeoutError("checkpoint never appeared")
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return d


def _mid_save(step):
    def ready(d):
        return any((t / ".metadata").exists() for t in d.glob(f"step_{step:06d}.tmp-*")) if d.is_dir() else False
    return ready


def _check_same(straight, resumed):
    (h1, sd1, o1), (h2, sd2, o2) = straight, resumed
    assert [h["loss"] for h in h2] == [h["loss"] for h in h1]
    assert h2[4]["lr_mult"] == h1[4]["lr_mult"] and h2[4]["step"] == 4       # the first resumed step's schedule
    for k in sd1: torch.testing.assert_close(sd2[k], sd1[k], rtol=0, atol=0)
    for n, st in o1["state"].items():
        for k, v in st.items():
            assert o2["state"][n][k].dtype == v.dtype
            torch.testing.assert_close(o2["state"][n][k], v, rtol=0, atol=0)


def test_sigkill_world1(tiny_base_dir):
    straight = _train(tiny_base_dir, "straight1")
    # killed right after the step-4 checkpoint is committed
    d = _run_and_kill(tiny_base_dir, "kill1", "after@4=300", lambda d: 4 in list_checkpoints(d))
    assert list_checkpoints(d) == [2, 4]
    _check_same(straight, _train(tiny_base_dir, "kill1", resume="true"))
    # killed in the middle of the save of step 6: shards written, not renamed -> step 4 is still the newest
    d = _run_and_kill(tiny_base_dir, "killmid1", "mid@6=300", _mid_save(6))
    assert list_checkpoints(d) == [2, 4] and list(d.glob("step_000006.tmp-*"))
    _check_same(straight, _train(tiny_base_dir, "killmid1", resume="auto"))


def test_sigkill_world2_torchrun(tiny_base_dir):
    straight = run_distributed(_train, 2, tiny_base_dir, "straight2", dp_mode="zero1", timeout=300)[0]
    d = _run_and_kill(tiny_base_dir, "killmid2", "mid@6=300", _mid_save(6), world=2, extra=["--dp-mode", "zero1"])
    assert list_checkpoints(d) == [2, 4]
    resumed = run_distributed(_train, 2, tiny_base_dir, "killmid2", dp_mode="zero1", resume="true", timeout=300)
    for r in resumed: _check_same(straight, r)
