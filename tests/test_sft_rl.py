"""SFT on 2 forked gloo ranks equals one process with the same total batch (losses and weights, fp64); the RL loop on
2 ranks runs and agrees across ranks; the SFT and RL CLIs list their options."""
import os
import subprocess
import sys
from dataclasses import asdict

import pytest
import torch

from nanolit.parallel.mesh import run_distributed

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


def _sft(base, run, total):
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    os.environ["NANOLIT_DTYPE"] = "float64"
    torch.set_default_dtype(torch.float64)
    from nanolit.sft import SFTConfig, sft
    from nanolit.checkpoint import load_checkpoint
    try:
        res = sft(SFTConfig(tag=run, source_tag="tiny_sft", sources="identity", device_batch_size=2, total_batch_size=total,
                            num_iterations=3, eval_every=-1, eval_batches=2, chat_eval_every=0, progress=False))
        sd, _, _ = load_checkpoint(res["checkpoint"], load_optim=False)
    finally:
        torch.set_default_dtype(torch.float32); os.environ.pop("NANOLIT_DTYPE", None)
    return [h["loss"] for h in res["history"]["train"]], [h["tokens"] for h in res["history"]["train"]], res["final_val_loss"], sd


def test_sft_two_ranks_equal_one_process(tiny_base_dir):
    _tiny_base(tiny_base_dir)
    total = 2 * T * 2
    ref_l, ref_n, ref_v, ref_sd = _sft(tiny_base_dir, "sft_ref", total)      # 1 process, 2 micro-steps
    outs = run_distributed(_sft, 2, tiny_base_dir, "sft_dp", total, timeout=300)  # 2 ranks, 1 micro-step each
    losses, counts, val, sd = outs[0]
    assert counts == ref_n                                  # the same trained tokens per step
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_l), atol=1e-6, rtol=1e-6)
    assert (val is None and ref_v is None) or val == pytest.approx(ref_v, rel=1e-6)
    for k in ref_sd: torch.testing.assert_close(sd[k], ref_sd[k], atol=1e-6, rtol=1e-6, msg=lambda m: f"{k}: {m}")
    assert outs[1][0] == losses                             # every rank reports the same all-reduced loss


def _rl(base, jsonl):
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    from nanolit.rl import RLConfig, rl
    res = rl(RLConfig(tag="rl_dp", source_stage="base", source_tag="tiny_sft", gsm8k_source=str(jsonl), num_iterations=1,
                      prompts_per_step=2, num_samples=2, max_new_tokens=6, eval_every=-1, eval_items=2, eval_k=2,
                      chat_eval_tasks="", progress=False))
    return res["final_eval"], res["history"]["train"][0]["reward"]


def test_rl_two_ranks_run_and_agree(tiny_base_dir):
    import json
    _tiny_base(tiny_base_dir)
    p = tiny_base_dir / "mini_gsm.jsonl"
    p.write_text("\n".join(json.dumps(dict(question=f"What is {i} and {i}?", answer=f"#### {2 * i}")) for i in range(20)))
    outs = run_distributed(_rl, 2, tiny_base_dir, p, timeout=300)
    assert outs[0] == outs[1]                                # evals and rewards are all-reduced: identical on both ranks


@pytest.mark.parametrize("mod,opt", [("nanolit.sft", "--sources"), ("nanolit.rl", "--num-samples")])
def test_cli_help(mod, opt):
    out = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0 and opt in out.stdout, out.stderr[-2000:]
