"""SFT and RL on 2 forked gloo ranks equal one process with the same total batch (fp64): each rank's own parameters
after training, not only numbers that are all-reduced (and so equal on every rank whatever the code does); a run
stopped halfway and resumed (on 2 ranks) equals the run never stopped; the SFT and RL CLIs list their options."""
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from nanolit.parallel.mesh import run_distributed
from _helpers import fp64

T = 64


def _tiny_base(base, tag="tiny_sft"):
    from nanolit.checkpoint import checkpoint_dir, save_checkpoint, list_checkpoints
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import get_tokenizer
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    d = checkpoint_dir("base", tag)
    if not (d.is_dir() and list_checkpoints(d)):
        gc = GPTConfig(sequence_len=T, vocab_size=get_tokenizer().vocab_size, n_layer=2, n_head=2, n_kv_head=2, n_embd=32)
        torch.manual_seed(0)
        m = build_model(gc, "cpu")
        with torch.no_grad():
            for p in m.parameters(): p.add_(0.02 * torch.randn_like(p))
        save_checkpoint(d, 0, m.state_dict(), None, dict(model_config=asdict(gc), config={}))
    return tag


def _own_model(module):
    "Patch `module.broadcast_parameters` to remember the model it is called with: this rank's own copy, read after the run."
    seen, orig = [], module.broadcast_parameters
    def spy(model, *a, **kw): seen.append(model); return orig(model, *a, **kw)
    module.broadcast_parameters = spy
    return seen, lambda: setattr(module, "broadcast_parameters", orig)


def _fp64(base, fn):
    "fn() in float64 (tests/_helpers.py `fp64`: why): layouts then differ by rounding only, ~1e-12, so a difference is a bug."
    with fp64(base): return fn()


def _mini_gsm8k(base, n=60):
    "A JSONL of n GSM8K-style problems (about 20% become SFT's held-out val conversations)."
    import json
    p = base / "mini_gsm_sft.jsonl"
    if p.exists(): return str(p)          # written once, by the first (one-process) run, before ranks fork
    p.write_text("\n".join(json.dumps(dict(question=f"Tom has {i} apples and buys {i + 3} more. How many now?",
                                           answer=f"He has {i}+{i + 3}=<<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3}.\n#### {2 * i + 3}"))
                           for i in range(n)))
    return str(p)


def _sft(base, run, total, eval_batches=2, steps=3, **kw):
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    import nanolit.sft as S
    seen, restore = _own_model(S)
    try:
        res = _fp64(base, lambda: S.sft(S.SFTConfig(tag=run, source_tag="tiny_sft", sources="identity,gsm8k",
                                              gsm8k_source=_mini_gsm8k(base), device_batch_size=2,
                                              total_batch_size=total, num_iterations=steps, eval_every=-1,
                                              eval_batches=eval_batches,
                                              chat_eval_every=0, progress=False, **kw)))
    finally: restore()
    sd = {k: v.detach().clone() for k, v in seen[0].state_dict().items()}     # this rank's parameters, from its memory
    return [h["loss"] for h in res["history"]["train"]], [h["tokens"] for h in res["history"]["train"]], res.get("final_val_loss"), sd


def _assert_same_params(sd, ref_sd, who):
    assert sd.keys() == ref_sd.keys()
    for k in ref_sd: torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-6, rtol=1e-6, msg=lambda m: f"{who} {k}: {m}")


def test_sft_two_ranks_equal_one_process(tiny_base_dir):
    _tiny_base(tiny_base_dir)
    total = 2 * T * 2
    ref_l, ref_n, ref_v, ref_sd = _sft(tiny_base_dir, "sft_ref", total)      # 1 process, 2 micro-steps
    outs = run_distributed(_sft, 2, tiny_base_dir, "sft_dp", total, timeout=300)  # 2 ranks, 1 micro-step each
    for rank, (losses, counts, val, sd) in enumerate(outs):
        assert counts == ref_n                              # the same trained tokens per step
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_l), atol=1e-6, rtol=1e-6)
        assert ref_v is not None and val == pytest.approx(ref_v, rel=1e-6)         # a held-out val set exists: compared
        _assert_same_params(sd, ref_sd, f"rank {rank}")    # each rank's own weights equal the one-process run's
    assert any(not torch.equal(ref_sd[k], v) for k, v in _sft_start(tiny_base_dir).items())   # and training moved them


def test_sft_val_loss_same_at_any_world(tiny_base_dir):
    "SFT's val loss scores the same val batches at 1, 2 and 3 data ranks (was: eval_batches from each rank's own shard)."
    _tiny_base(tiny_base_dir)
    ref = _sft(tiny_base_dir, "sft_val1", 2 * T * 6, eval_batches=1, steps=1)[2]
    assert ref is not None
    for world in (2, 3):
        for r in run_distributed(_sft, world, tiny_base_dir, f"sft_val{world}", 2 * T * 6, 1, 1, timeout=300):
            assert r[2] == pytest.approx(ref, rel=1e-9), (world, r[2], ref)


def test_sft_resume_equals_uninterrupted(tiny_base_dir):
    """SFT stopped after 2 of 4 steps (`stop_after`, one process, 2 micro-steps) and resumed on 2 ranks (the same data
    slots) ends with the uninterrupted run's losses, val loss and weights, on each rank (fp64)."""
    _tiny_base(tiny_base_dir)
    total = 2 * T * 2
    ref_l, ref_n, ref_v, ref_sd = _sft(tiny_base_dir, "sft_full", total, steps=4)
    cut_l, _, _, cut_sd = _sft(tiny_base_dir, "sft_cut", total, steps=4, stop_after=2)
    assert cut_l == ref_l[:2] and any(not torch.equal(cut_sd[k], ref_sd[k]) for k in ref_sd)   # stopped halfway
    outs = run_distributed(_sft, 2, tiny_base_dir, "sft_cut", total, 2, 4, resume="true", timeout=300)
    for rank, (losses, counts, val, sd) in enumerate(outs):
        assert counts == ref_n, rank
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_l), atol=1e-6, rtol=1e-6)
        assert ref_v is not None and val == pytest.approx(ref_v, rel=1e-6)
        _assert_same_params(sd, ref_sd, f"resumed rank {rank}")


def _sft_ckpt(base, run, total, steps=4, **kw):
    "An SFT run (fp64) read back from its checkpoint (full tensors at any layout): (per-step losses, weights)."
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    import nanolit.sft as S
    from nanolit.checkpoint import load_checkpoint
    with fp64(base):
        res = S.sft(S.SFTConfig(tag=run, source_tag="tiny_sft", sources="identity,gsm8k", gsm8k_source=_mini_gsm8k(base),
                                device_batch_size=2, total_batch_size=total, num_iterations=steps, eval_every=-1,
                                eval_batches=2, chat_eval_every=0, progress=False, **kw))
        sd = load_checkpoint(res["checkpoint"], load_optim=False)[0]
    return [h["loss"] for h in res["history"]["train"]], sd


def test_sft_resume_across_tensor_parallel(tiny_base_dir):
    """A tp 2 SFT run stopped after 2 of 4 steps resumes on one process, and a one-process run stopped there resumes
    at tp 2 (2 ranks): both end with the uninterrupted one-process run's losses and weights (fp64)."""
    _tiny_base(tiny_base_dir)
    total = 2 * T * 2
    ref_l, ref_sd = _sft_ckpt(tiny_base_dir, "sft_tpr_full", total)
    run_distributed(_sft_ckpt, 2, tiny_base_dir, "sft_tpr_cut2", total, stop_after=2, tp=2, timeout=300)
    outs = [_sft_ckpt(tiny_base_dir, "sft_tpr_cut2", total, resume="true")]                    # tp 2 -> one process
    cut_l, cut_sd = _sft_ckpt(tiny_base_dir, "sft_tpr_cut1", total, stop_after=2)
    assert cut_l == ref_l[:2] and any(not torch.equal(cut_sd[k], ref_sd[k]) for k in ref_sd)     # stopped halfway
    outs += run_distributed(_sft_ckpt, 2, tiny_base_dir, "sft_tpr_cut1", total, resume="true", tp=2, timeout=300)
    for who, (losses, sd) in zip(["tp 2 -> 1", "1 -> tp 2, rank 0", "1 -> tp 2, rank 1"], outs):
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_l), atol=1e-6, rtol=1e-6, msg=who)
        _assert_same_params(sd, ref_sd, who)


def _sft_start(base):
    from nanolit.checkpoint import checkpoint_dir, load_checkpoint
    return load_checkpoint(checkpoint_dir("base", "tiny_sft"), load_optim=False)[0]


class _Judge:
    "A judge that fails in every way a user's function or a sandbox can: it raises, returns None or NaN, or answers."
    def evaluate(self, conversation, completion):
        h = sum(map(ord, completion)) % 8
        if h == 0: raise RuntimeError("judge crashed")
        return [None, None, math.nan][h - 1] if h <= 3 else len(completion) % 2 == 0


def _rl(base, jsonl, tag, steps=2, **kw):
    "One RL run (fp64) whose rewards come from `_Judge` through the real `reward`: (train history, this rank's params)."
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    import nanolit.rl as R
    seen, restore = _own_model(R)
    real_reward = R.reward
    R.reward = lambda task, conv, completion: real_reward(_Judge(), conv, completion)
    try:
        res = _fp64(base, lambda: R.rl(R.RLConfig(tag=tag, source_stage="base", source_tag="tiny_sft", gsm8k_source=str(jsonl),
                                            num_iterations=steps, prompts_per_step=4, num_samples=4, max_new_tokens=6,
                                            temperature=0.7, top_k=20, eval_every=-1, eval_items=2, eval_k=2,
                                            chat_eval_tasks="", progress=False, **kw)))
    finally: R.reward = real_reward; restore()
    return res["history"]["train"], {k: v.detach().clone() for k, v in seen[0].state_dict().items()}


def test_rl_two_ranks_equal_one_process(tiny_base_dir):
    """The same groups (problems and rollout seeds do not depend on the layout) on 2 ranks and on 1 process give each
    rank the one-process weights after the steps; invalid rewards are counted identically and the steps still learn."""
    _tiny_base(tiny_base_dir)
    p = tiny_base_dir / "mini_gsm.jsonl"
    p.write_text("\n".join(json.dumps(dict(question=f"What is {i} and {i}?", answer=f"#### {2 * i}")) for i in range(20)))
    ref_h, ref_sd = _rl(tiny_base_dir, p, "rl_ref")
    assert all(h["updated"] for h in ref_h), ref_h               # there is a gradient to get wrong
    assert sum(h["invalid_rewards"] for h in ref_h) > 0, ref_h   # and failed rewards among the samples
    assert all(math.isfinite(h["loss"]) and math.isfinite(h["reward"]) for h in ref_h)
    outs = run_distributed(_rl, 2, tiny_base_dir, p, "rl_dp", timeout=300)
    for rank, (h, sd) in enumerate(outs):
        _assert_same_params(sd, ref_sd, f"rank {rank}")          # each rank's own weights equal the one-process run's
        for k in ("tokens", "invalid_rewards", "updated"): assert [r[k] for r in h] == [r[k] for r in ref_h], (rank, k)
        torch.testing.assert_close(torch.tensor([r["loss"] for r in h]), torch.tensor([r["loss"] for r in ref_h]), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(torch.tensor([r["reward"] for r in h]), torch.tensor([r["reward"] for r in ref_h]), atol=1e-12, rtol=0)
    assert any(not torch.equal(ref_sd[k], v) for k, v in _sft_start(tiny_base_dir).items())   # the steps moved the weights


def test_rl_resume_equals_uninterrupted(tiny_base_dir):
    """RL stopped after 1 of 3 steps on one process and resumed on 2 ranks ends with the uninterrupted run's
    weights on each rank and the same per-step history (fp64). (The last step of a schedule decayed to 0 moves
    nothing, so 3 steps: the resumed run must train step 1.)"""
    _tiny_base(tiny_base_dir)
    p = tiny_base_dir / "mini_gsm_resume.jsonl"
    p.write_text("\n".join(json.dumps(dict(question=f"What is {i} and {i}?", answer=f"#### {2 * i}")) for i in range(20)))
    ref_h, ref_sd = _rl(tiny_base_dir, p, "rl_full", steps=3)
    assert all(h["updated"] for h in ref_h), ref_h               # there is a gradient to get wrong
    cut_h, cut_sd = _rl(tiny_base_dir, p, "rl_cut", steps=3, stop_after=1)
    assert len(cut_h) == 1 and any(not torch.equal(cut_sd[k], ref_sd[k]) for k in ref_sd)
    for rank, (h, sd) in enumerate(run_distributed(_rl, 2, tiny_base_dir, p, "rl_cut", 3, resume="true", timeout=300)):
        _assert_same_params(sd, ref_sd, f"resumed rank {rank}")
        for k in ("tokens", "invalid_rewards", "updated"): assert [r[k] for r in h] == [r[k] for r in ref_h], (rank, k)
        torch.testing.assert_close(torch.tensor([r["reward"] for r in h]), torch.tensor([r["reward"] for r in ref_h]), atol=1e-12, rtol=0)


@pytest.mark.parametrize("mod,opt", [("nanolit.sft", "--sources"), ("nanolit.rl", "--num-samples")])
def test_cli_help(mod, opt):
    out = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0 and opt in out.stdout, out.stderr[-2000:]


def test_rl_refuses_greedy():
    from nanolit.rl import RLConfig, rl
    with pytest.raises(ValueError, match="temperature > 0"): rl(RLConfig(temperature=0.0))


def test_advantages_and_rewards_edge_cases():
    "All-equal groups give exact zeros; huge rewards are invalid, not inf; only bools and finite numbers are rewards."
    from nanolit.rl import group_advantages, reward
    for g in ([[0.1, 0.1, 0.1]], [[0.7, 0.7, 0.7, None]], [[1 / 3] * 5]):
        assert torch.equal(group_advantages(g), torch.zeros(1, len(g[0])))              # was about 1e-17
    a = group_advantages([[1e308, 1e308, 1.0, 0.0]])
    assert torch.isfinite(a).all() and a[0, :2].eq(0).all() and a[0, 2:].tolist() == [0.5, -0.5]

    class Judge:
        def __init__(self, v): self.v = v
        def evaluate(self, conversation, completion): return self.v
    for v, want in [(True, 1.0), (False, 0.0), (0.5, 0.5), (1, 1.0), (torch.tensor(1.0), 1.0)]:
        assert reward(Judge(v), {}, "x") == want
    for v in ["False", "1", torch.tensor([1.0, 0.0]), [1], None, math.nan, math.inf]:
        assert math.isnan(reward(Judge(v), {}, "x")), v                                # invalid, never raises
