"""End-to-end CLI runs: `python -m nanolit.train` and a 2-process `torchrun -m nanolit.train` (gloo) give the same
losses and parameters with the same total batch; the tokenizer CLI trains and saves; the report command writes the
run report; the stage console scripts parse their own options."""
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ARGS = ["--depth", "2", "--sequence-len", "32", "--device-batch-size", "2", "--num-iterations", "3",
        "--eval-every", "-1", "--eval-tokens", "512", "--progress", "false"]


def _env(base):
    return {**os.environ, "NANOLIT_BASE_DIR": str(base), "OMP_NUM_THREADS": "1", "NANOLIT_DEVICE": "cpu"}


def _result(base, run):
    from nanolit.checkpoint import load_checkpoint
    d = Path(base) / "checkpoints" / "base" / run
    sd, _, meta = load_checkpoint(d, load_optim=False)
    return [h["loss"] for h in meta["history"]["train"]], sd


def test_torchrun_two_processes_equal_one(tiny_base_dir):
    total = str(2 * 32 * 2)
    one = subprocess.run([sys.executable, "-m", "nanolit.train", "--tag", "cli1", "--total-batch-size", total, *ARGS],
                         env=_env(tiny_base_dir), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "nanolit.train", "--tag", "cli2", "--total-batch-size", total, *ARGS],
                         env=_env(tiny_base_dir), capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    l1, sd1 = _result(tiny_base_dir, "cli1")
    l2, sd2 = _result(tiny_base_dir, "cli2")
    torch.testing.assert_close(torch.tensor(l2), torch.tensor(l1), atol=1e-5, rtol=1e-5)
    for k in sd1: torch.testing.assert_close(sd2[k], sd1[k], atol=1e-5, rtol=1e-5)
    assert "done: val bpb" in one.stdout


def test_train_help_lists_options():
    out = subprocess.run([sys.executable, "-m", "nanolit.train", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--depth" in out.stdout and "--resume" in out.stdout
    assert "the one dial" in out.stdout  # field comments become the help text, also under python -m


def test_report_command(tiny_base_dir, tmp_path):
    "`python -m nanolit.rl report --tag T --answer FILE` writes the run report with the answer; stages not run are noted."
    answer = tmp_path / "answer.txt"
    answer.write_text("> What is your name?\nI am nanolit.\n")
    out = subprocess.run([sys.executable, "-m", "nanolit.rl", "report", "--tag", "no_such_run", "--answer", str(answer)],
                         env=_env(tiny_base_dir), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    path = Path(tiny_base_dir) / "report" / "no_such_run.md"
    assert out.stdout.strip() == f"report: {path}"
    text = path.read_text()
    assert "## Final one-shot chat answer\n\n```\n> What is your name?\nI am nanolit.\n```" in text
    assert text.count("not found in") == 3   # base, sft, rl: noted, not an error


def test_stage_console_scripts(tmp_path):
    """The console scripts' targets (nanolit.sft:main, nanolit.rl:main, nanolit.rl:report_main) parse their own argv,
    run from a wrapper script like the one pip writes for a `[project.scripts]` entry."""
    for target, opt in [("nanolit.sft:main", "--sources"), ("nanolit.rl:main", "--num-samples"),
                        ("nanolit.rl:report_main", "--answer")]:
        mod, fn = target.split(":")
        script = tmp_path / fn
        script.write_text(f"import sys\nfrom {mod} import {fn}\nsys.exit({fn}())\n")
        out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert out.returncode == 0 and opt in out.stdout, (target, out.stdout[-1000:], out.stderr[-2000:])
