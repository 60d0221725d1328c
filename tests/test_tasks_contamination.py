"""Issue 14 item 6: an eval never scores an item its model trained on. SFT and RL record the eval items they trained
on (`trained_on` in the checkpoint meta, united along the lineage); `python -m nanolit.evaluate chat` drops them and says
how many it scored and excluded. The real GSM8K train download is tested against a loopback Hub made here."""
import functools
import http.server
import io
import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nanolit import tasks as T
from nanolit import sft as S

ROOT = Path(__file__).resolve().parents[1]


def _gsm(prefix, n):
    return [dict(question=f"{prefix} problem {i}: what is {i} + {i}?", answer=f"{i}+{i}=<<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}")
            for i in range(n)]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass


@pytest.fixture
def loopback_hub(tmp_path, monkeypatch):
    "A loopback Hugging Face Hub serving openai/gsm8k main train (two parquet files) and test (one), as the Hub lays them out."
    import pyarrow as pa, pyarrow.parquet as pq
    root = tmp_path / "hub"
    train, test = _gsm("train", 30), _gsm("test", 12)
    files = {"train": [train[:17], train[17:]], "test": [test]}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    for split, parts in files.items():
        d = root / "files" / split; d.mkdir(parents=True)
        for k, rows in enumerate(parts): pq.write_table(pa.Table.from_pylist(rows), d / f"{k:04d}.parquet")
        listing = root / "api/datasets/openai/gsm8k/parquet/main" / split
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text(json.dumps([f"{url}/files/{split}/{k:04d}.parquet" for k in range(len(parts))]))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1"); monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tmp_path / "base"))
    yield SimpleNamespace(url=url, train=train, test=test)
    srv.shutdown()


def test_gsm8k_train_download_and_disjoint_eval(loopback_hub):
    "Online: the real train split is the pool, all of test is the eval, and the lineage's record excludes none of it."
    assert T.fetch_online("gsm8k_train") == loopback_hub.train          # both parquet files, in order
    assert T.fetch_online("gsm8k") == loopback_hub.test
    pool, held = S.gsm8k_pool("online")
    assert pool == loopback_hub.train and held == loopback_hub.test
    rec = json.loads((T.eval_data_dir() / "gsm8k_split.json").read_text())
    assert (rec["source"], rec["n_pool"], rec["n_heldout"]) == ("online", 30, 12)
    sft_meta = S.lineage_meta(SimpleNamespace(source_stage="base", source_tag="", tag="t"), {},
                              S.trained_keys(T.TaskMixture([T.GSM8K(pool)]), "gsm8k"))
    rl_meta = S.lineage_meta(SimpleNamespace(source_stage="sft", source_tag="", tag="t", gsm8k_source="online"), sft_meta)
    assert len(rl_meta["trained_on"]["gsm8k"]) == 30
    test_task = T.GSM8K(T.fetch_online("gsm8k"))
    assert test_task.exclude(rl_meta["trained_on"]["gsm8k"]) == 0 and len(test_task) == 12
    # offline (the packaged test set split): the same record excludes exactly the pool from the whole test set
    jsonl = Path(os.environ["NANOLIT_BASE_DIR"]) / "g.jsonl"
    jsonl.write_text("\n".join(json.dumps(x) for x in loopback_hub.test + loopback_hub.train))
    pool2, held2 = S.gsm8k_pool(str(jsonl), record=False)
    rl2 = S.lineage_meta(SimpleNamespace(source_stage="sft", source_tag="", tag="t", gsm8k_source=str(jsonl)), {})
    whole = T.GSM8K(loopback_hub.test + loopback_hub.train)
    assert whole.exclude(rl2["trained_on"]["gsm8k"]) == len(pool2) and whole.items == held2


def test_hf_download_fails_clearly(loopback_hub):
    import requests
    with pytest.raises(requests.HTTPError):
        T.hf_parquet_rows("openai/gsm8k", "main", "validation")           # no such split on the Hub: its 404, not rows


def _tiny_checkpoint(base: Path, stage: str, meta_extra: dict):
    from nanolit.checkpoint import checkpoint_dir, save_checkpoint
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import Tokenizer
    tok = Tokenizer.load(base / "tokenizer")
    torch.manual_seed(0)
    m = build_model(GPTConfig(sequence_len=128, vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_kv_head=2, n_embd=32), "cpu")
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    save_checkpoint(checkpoint_dir(stage, "tiny"), 1, m.state_dict(), meta=dict(model_config=asdict(m.config), **meta_extra))


def test_cli_chat_excludes_the_lineage_items(tiny_base_dir, monkeypatch):
    "`python -m nanolit.evaluate chat --stage sft` scores only items its checkpoint did not train on, and says how many."
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    items, mc = _gsm("q", 7), [dict(question=f"Pick {i}", choices=["a", "b", "c", "d"], answer=i % 4, subject="s") for i in range(5)]
    d = tiny_base_dir / "eval_data"; d.mkdir(exist_ok=True)
    T.write_jsonl(d / "gsm8k.jsonl", items); T.write_jsonl(d / "mmlu.jsonl", mc)
    trained = dict(gsm8k=sorted(T.GSM8K([]).item_key(it) for it in items[:5]), mmlu=[T.MMLU([]).item_key(mc[2])])
    _tiny_checkpoint(tiny_base_dir, "sft", dict(trained_on=trained))
    _tiny_checkpoint(tiny_base_dir, "base", {})
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = {}
    for stage in ("sft", "base"):
        r = subprocess.run([sys.executable, "-m", "nanolit.evaluate", "chat", "--stage", stage, "--tag", "tiny", "--tasks", "gsm8k,mmlu",
                            "--device", "cpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        import csv
        out[stage] = ({row["task"]: (int(row["n_scored"]), int(row["n_excluded"])) for row in
                       csv.DictReader(open(tiny_base_dir / "eval" / f"{stage}_tiny_chat.csv"))}, r.stdout)
    assert out["sft"][0] == {"gsm8k": (2, 5), "mmlu": (4, 1)}, out["sft"]
    assert "6 items scored, 6 excluded as trained on" in out["sft"][1], out["sft"][1]
    assert out["base"][0] == {"gsm8k": (7, 0), "mmlu": (5, 0)}          # a base model trained on no eval item


def test_sft_records_what_it_trained_on(tiny_base_dir, monkeypatch, tmp_path):
    "A real (tiny) SFT run on a GSM8K pool records the pool's keys; its own chat eval then scores held-out items only."
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tiny_base_dir))
    _tiny_checkpoint(tiny_base_dir, "base", {})
    jsonl = tmp_path / "g.jsonl"; jsonl.write_text("\n".join(json.dumps(x) for x in _gsm("s", 40)))
    pool, held = S.gsm8k_pool(str(jsonl), record=False)
    res = S.sft(S.SFTConfig(tag="tiny", sources="identity,gsm8k", gsm8k_source=str(jsonl), device_batch_size=4, num_iterations=1,
                            eval_every=-1, chat_eval_every=-1, chat_eval_tasks="gsm8k", chat_eval_items=3, progress=False))
    from nanolit.checkpoint import checkpoint_dir, list_checkpoints
    cd = checkpoint_dir("sft", "tiny")
    meta = json.loads((cd / f"step_{list_checkpoints(cd)[-1]:06d}" / "meta.json").read_text())
    assert meta["trained_on"] == {"gsm8k": sorted(T.GSM8K([]).item_key(it) for it in pool)}
    assert [(r["task"], r["n_scored"], r["n_excluded"]) for r in res["chat_eval"]] == [("gsm8k", min(3, len(held)), 0)]
