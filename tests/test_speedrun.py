"""runs/speedrun.sh end to end, as far as a CPU can prove it.

- Its plan (PLAN_ONLY=1: the same `nanolit.train --plan` call the script makes before anything else) fits an 80 GB
  H100 at its own defaults (ZeRO-2), at depth 24, and at depth 24 under DDP with 8 rows; a config that does not
  fit (depth 24 at 32 rows) stops the script with one clear line. The Slurm job plans the same way.
- SMOKE=1 runs this same script at toy scale: 2 gloo ranks through torchrun, the shards downloaded from a loopback HTTP
  server this test starts, every stage (data, tokenizer, pretraining, CORE and bpb, SFT, RL, chat eval, report); each
  stage's artifact is checked, then the script runs again and every training stage resumes as complete."""
import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(script, env, timeout=120):
    full = {**os.environ, "PY": sys.executable, "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(ROOT / script)], env=full, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("env", [{}, {"DEPTH": "24"}, {"DEPTH": "24", "DP_MODE": "ddp", "DEVICE_BATCH": "8"}])
def test_speedrun_plan_fits_h100(env, tmp_path):
    r = _script("runs/speedrun.sh", {"PLAN_ONLY": "1", "NANOLIT_BASE_DIR": str(tmp_path), **env})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"depth {env.get('DEPTH', 20)} (" in r.stdout and "on 8 x h100" in r.stdout, r.stdout
    assert "fits (" in r.stdout and "traced on meta" in r.stdout, r.stdout
    assert not list(tmp_path.iterdir())  # the plan wrote nothing: no data, tokenizer or checkpoint


def test_speedrun_plan_refuses_what_does_not_fit(tmp_path):
    r = _script("runs/speedrun.sh", {"PLAN_ONLY": "1", "DEPTH": "24", "DEVICE_BATCH": "32", "NANOLIT_BASE_DIR": str(tmp_path)})
    assert r.returncode != 0 and "does NOT fit" in r.stdout
    errors = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "lower --device-batch-size" in errors[0], r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_slurm_plan_fits_h100(tmp_path):
    r = _script("runs/slurm.sbatch", {"PLAN_ONLY": "1", "VOCAB": "65536", "SLURM_NNODES": "2",
                                      "NANOLIT_BASE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "depth 26 (" in r.stdout and "on 16 x h100" in r.stdout and "fits (" in r.stdout, r.stdout


def _serve_shards(root: Path, n: int = 3):
    "n parquet shards (`text` column) of the shipped Shakespeare, served on loopback; returns (url, server)."
    import pyarrow as pa
    import pyarrow.parquet as pq
    from nanolit.core import sample_texts
    docs = [p for t in sample_texts().values() for p in t.split("\n\n") if p.strip()]
    root.mkdir(parents=True)
    for i in range(n):
        pq.write_table(pa.table({"text": docs[i::n]}), root / f"shard_{i:05d}.parquet", row_group_size=64)
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/", server


def test_speedrun_smoke_every_stage_then_resumes(tmp_path):
    url, server = _serve_shards(tmp_path / "remote")
    base = tmp_path / "base"
    env = {"SMOKE": "1", "DATA_URL": url, "NANOLIT_BASE_DIR": str(base)}
    try:
        r = _script("runs/speedrun.sh", env, timeout=900)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-6000:]
        for stage in range(9):
            assert f"== {stage}/8 " in r.stdout, f"stage {stage} missing"
        # every stage's artifact
        assert sorted(p.name for p in (base / "data").glob("*.parquet")) == ["train_00000.parquet",
                                                                              "train_00001.parquet", "val_00002.parquet"]
        assert (base / "tokenizer" / "tokenizer.json").exists()
        for stage in ("base", "sft", "rl"):
            assert list((base / "checkpoints" / stage / "d2").glob("step_*")), f"no {stage} checkpoint"
        assert "world 2: DataParallel(dp 2, zero2)" in r.stdout  # two ranks through torchrun, the ZeRO-2 rung
        assert "CORE " in r.stdout and "val bpb" in r.stdout and "ChatCORE" in r.stdout
        report = base / "report" / "d2.md"
        assert report.exists() and "What is your name" in report.read_text()
        # again: the shards and tokenizer are kept, and every training stage resumes as complete
        r2 = _script("runs/speedrun.sh", env, timeout=900)
        assert r2.returncode == 0, (r2.stdout + r2.stderr)[-6000:]
        assert "kept the tokenizer" in r2.stdout
        assert r2.stdout.count("is already complete") >= 3, r2.stdout
    finally:
        server.shutdown()


def test_gpu_check_says_why_it_cannot_run_on_a_cpu():
    r = subprocess.run([sys.executable, str(ROOT / "dev/gpu_check.py")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode != 0 and "no CUDA GPU: this check is for a GPU machine" in r.stderr
