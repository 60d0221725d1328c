"""Weights & Biases tracking (10b `Tracker`), offline, no network: `train --wandb-project` writes an offline W&B run
under the checkpoint dir holding the config, every step's loss/tok-s/MFU/grad norm, the val bpb, the samples table
and the result as summary (read back from the run's own files); a resumed run continues the same W&B run; a run with
tracking off never imports wandb."""
import json
import os
import struct
import subprocess
import sys
import time

import pytest

wandb = pytest.importorskip("wandb")

from nanolit.train import TrainConfig, train

SMALL = dict(depth=1, sequence_len=32, device_batch_size=2, eval_every=2, eval_tokens=256, progress=False,
             sample_every=4, loader_buffer=8, num_iterations=4, total_batch_size=64, grad_clip=1.0)


@pytest.fixture
def offline(tiny_base_dir, monkeypatch):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tiny_base_dir


def _scan(path):
    """The records of a .wandb file: a 7-byte header (':W&B', magic, version), then LevelDB's log format: 32 KiB
    blocks of records, each a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last) and its bytes."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:8]
    pos, out, part = 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:               # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind == 0:
            break
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            out.append(part)
    return out


def _records(run_dir, timeout=30.0):
    """Every history row, the summary and the config of the offline W&B run(s) in `run_dir`, read from its .wandb
    files (wandb's service may still be writing after `finish()` returns: read until every file has its exit record)."""
    from wandb.proto import wandb_internal_pb2
    deadline = time.time() + timeout
    while True:
        rows, summary, config, exits = [], {}, {}, 0
        files = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
        for f in files:
            for data in _scan(f):
                rec = wandb_internal_pb2.Record(); rec.ParseFromString(data)
                kind = rec.WhichOneof("record_type")
                if kind == "history":
                    rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
                elif kind == "summary":
                    summary.update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                    for i in rec.summary.update})
                elif kind in ("config", "run"):
                    upd = rec.config.update if kind == "config" else rec.run.config.update
                    config.update({i.key: json.loads(i.value_json) for i in upd})
                elif kind == "exit":
                    exits += 1
        if (files and exits == len(files)) or time.time() > deadline:
            return rows, summary, config
        time.sleep(0.5)


def test_train_logs_an_offline_run(offline):
    res = train(TrainConfig(tag="tracked", wandb_project="nanolit-test", **SMALL))
    run_dir = offline / "checkpoints" / "base" / "tracked"
    rows, summary, config = _records(run_dir)
    steps = [r for r in rows if "loss" in r]
    assert [r["_step"] for r in steps] == [0, 1, 2, 3]
    for r in steps:
        assert {"loss", "lr_mult", "tok_s", "mfu", "grad_norm"} <= set(r) and r["grad_norm"] > 0
    assert [h["loss"] for h in res["history"]["train"]] == [r["loss"] for r in steps]
    assert any("lr" in r for r in rows)
    val = [(r["_step"], r["val/bpb"]) for r in rows if "val/bpb" in r]
    assert val == [(h["step"], h["bpb"]) for h in res["history"]["val"]] and len(val) == 3   # steps 0, 2, 4
    assert any(r.get("samples/_type") == "table-file" for r in rows), rows
    tables = list(run_dir.glob("wandb/offline-run-*/files/media/table/samples_*.table.json"))
    assert tables and json.loads(tables[0].read_text())["columns"] == ["prompt", "sample"]
    config = {k: v["value"] if isinstance(v, dict) and "value" in v else v for k, v in config.items()}
    assert config["depth"] == 1 and config["wandb_project"] == "nanolit-test" and config["dp_mode"] == "naive"
    assert summary["final_val_bpb"] == res["final_val_bpb"] and "model_config/n_layer" in summary, summary
    assert (run_dir / "wandb_id").exists()


def test_resume_continues_the_same_wandb_run(offline):
    kw = dict(tag="tracked_resume", wandb_project="nanolit-test", **SMALL)
    train(TrainConfig(stop_after=2, **kw))
    run_dir = offline / "checkpoints" / "base" / "tracked_resume"
    first = (run_dir / "wandb_id").read_text()
    train(TrainConfig(resume="true", **kw))
    assert (run_dir / "wandb_id").read_text() == first
    ids = {f.stem.split("-")[-1] for f in run_dir.glob("wandb/offline-run-*/run-*.wandb")}
    assert ids == {first}, ids                  # both parts belong to one W&B run
    rows, _, _ = _records(run_dir)
    assert sorted(r["_step"] for r in rows if "loss" in r) == [0, 1, 2, 3]


def test_tracking_off_never_imports_wandb(offline):
    code = ("import sys; from nanolit.train import TrainConfig, train; "
            f"train(TrainConfig(tag='untracked', **{SMALL!r})); print('wandb' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=os.environ)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "False"
