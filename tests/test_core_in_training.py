"""CORE during training (`--core-every`): a fixed subset of every built CORE task scored at the cadence, into the
history and the log with its cost; the last one equals `nanolit-eval base`'s CORE of the saved model on the same
items (10a `eval_base`, an independent path); without built tasks it says so and trains on."""
import json

import pytest

from nanolit.evaluate import eval_base, open_checkpoint
from nanolit.tasks import eval_data_dir
from nanolit.train import TrainConfig, train

SMALL = dict(depth=1, sequence_len=32, device_batch_size=2, eval_every=-1, eval_tokens=256, progress=False,
             sample_every=-1, loader_buffer=8, num_iterations=4, total_batch_size=64)


def _tasks():
    mc = [dict(query=f"The {w} sat on the", choices=["mat", "sky", "sea", "king"], gold=i % 4)
          for i, w in enumerate(["cat", "dog", "king", "queen", "lord", "fool"])]
    lm = [dict(context=f"To be or not to", continuation=" be") for _ in range(5)]
    return {"hellaswag_zeroshot": mc, "lambada_openai": lm}


def test_core_every_scores_a_fixed_subset(tiny_base_dir, monkeypatch, capsys):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    d = eval_data_dir(); d.mkdir(exist_ok=True)
    for name, items in _tasks().items():
        (d / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    try:
        res = train(TrainConfig(tag="core_every", core_every=2, core_items=4, **SMALL))
        out = capsys.readouterr().out
        core = res["history"]["core"]
        assert [c["step"] for c in core] == [0, 2, 4] and all(c["tasks"] == 2 for c in core), core
        assert "CORE" in out and "2 tasks x <= 4 items" in out and " s)" in out, out
        model, tok, _ = open_checkpoint("base", "core_every", None, "cpu")[:3]
        ref = eval_base(model.eval(), tok, max_per_task=4, tasks=list(_tasks()))
        assert ref["core"] == pytest.approx(core[-1]["core"], abs=1e-9), (ref["core"], core)
    finally:
        for name in _tasks():
            (d / f"{name}.jsonl").unlink()


def test_core_every_without_tasks_says_so(tiny_base_dir, monkeypatch, capsys):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    train(TrainConfig(tag="core_none", core_every=-1, **SMALL))
    assert "CORE skipped: no CORE task built" in capsys.readouterr().out


def test_core_every_refused_where_ranks_hold_pieces():
    with pytest.raises(ValueError, match="--core-every 2: scores CORE with a whole model on every rank"):
        train(TrainConfig(tag="x", core_every=2, tp=2, **SMALL))
