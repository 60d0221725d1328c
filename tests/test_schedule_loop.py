"""The training loop trains steps 0..N-1 and runs each at `lr_multiplier(step, N, ...)`: the first at > 0, the last at
exactly final_lr_frac (a warmdown reaching its final value only at step N, which is never trained, was the bug)."""
import pytest

from nanolit.optim import lr_multiplier
from nanolit.train import TrainConfig, train


def test_loop_trains_the_schedule_to_its_end(tiny_base_dir, monkeypatch):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    N, W, r, phi = 6, 2, 0.5, 0.1
    res = train(TrainConfig(tag="sched", depth=2, sequence_len=32, device_batch_size=2, num_iterations=N, warmup_steps=W,
                            warmdown_ratio=r, final_lr_frac=phi, eval_every=-1, eval_tokens=64, sample_every=-1,
                            progress=False, loader_buffer=8))
    hist = res["history"]["train"]
    assert [h["step"] for h in hist] == list(range(N))
    assert [h["lr_mult"] for h in hist] == [lr_multiplier(s, N, W, r, phi) for s in range(N)]
    lrm = [h["lr_mult"] for h in hist]
    assert lrm[1] == 1.0 and lrm[-1] == phi and lrm == pytest.approx([0.5, 1.0, 1.0, 0.7, 0.4, 0.1], abs=1e-12)


@pytest.mark.parametrize("args", [(0, 10, 0, "0.2"), (0, 10, 0, 0.2, None), (0, 10, 0, 0.2, "0"), (0, 10, 0, True)])
def test_schedule_bad_types_are_one_clear_error(args):
    "A string or None for a fraction is a ValueError naming the argument (was a TypeError from a comparison)."
    from nanolit.optim import lr_multiplier
    with pytest.raises(ValueError, match="warmdown_ratio|final_lr_frac"):
        lr_multiplier(*args)
