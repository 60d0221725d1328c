"""The official CORE bundle (10a): `fetch_core_bundle` downloads a zip from a loopback server (a tiny bundle this test
makes in DCLM's layout: core.yaml, eval_meta_data.csv, eval_data/), checks its sha256, refuses a bad checksum or a
non-zip in one line keeping nothing, and `eval_base` then scores it: CORE equals a hand computation of the centered
accuracy on those items; `nanolit-eval base` labels which CORE it printed."""
import functools
import hashlib
import http.server
import io
import json
import threading
import zipfile

import pytest
import torch

from nanolit.eval import evaluate_core_item, fewshot_indices
from nanolit.evaluate import base_title, core_bundle_dir, eval_base, fetch_core_bundle, load_core_bundle
from nanolit.model import GPTConfig, build_model
from nanolit.tokenizer import Tokenizer
from nanolit.core import sample_texts

CORE_YAML = """icl_tasks:
- label: piqa
  dataset_uri: commonsense_reasoning/piqa.jsonl
  num_fewshot: [1]
  icl_task_type: multiple_choice
  continuation_delimiter: ' '
- label: lambada_openai
  dataset_uri: language_understanding/lambada_openai.jsonl
  num_fewshot: [0]
  icl_task_type: language_modeling
- label: winograd
  dataset_uri: language_understanding/winograd_wsc.jsonl
  num_fewshot: [0]
  icl_task_type: schema
"""
META = "Eval Task,Task Category,Task Type,#shots,Random baseline,Centered Metric?,Description\n" \
       "piqa,commonsense reasoning,multiple choice,10,50,yes,x\n" \
       "lambada_openai,language understanding,language modeling,0,0,yes,x\n" \
       "winograd,language understanding,schema,0,50,yes,x\n"
ITEMS = {
    "commonsense_reasoning/piqa.jsonl": [dict(query=f"How to {w}?", choices=["slowly", "never"], gold=i % 2)
                                         for i, w in enumerate(["cook", "run", "sing", "read"])],
    "language_understanding/lambada_openai.jsonl": [dict(context="To be or not to", continuation=" be")] * 3,
    "language_understanding/winograd_wsc.jsonl": [dict(context_options=["Ann ran", "Bob ran"], continuation="fast.",
                                                       gold=1)] * 2,
}


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("eval_bundle/core.yaml", CORE_YAML)
        z.writestr("eval_bundle/eval_meta_data.csv", META)
        for path, items in ITEMS.items():
            z.writestr(f"eval_bundle/eval_data/{path}", "".join(json.dumps(x) + "\n" for x in items))
    return buf.getvalue()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"; root.mkdir()
    (root / "eval_bundle.zip").write_bytes(_zip())
    (root / "not_a.zip").write_bytes(b"<html>rate limited</html>")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a): pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_fetch_checks_and_scores_the_official_bundle(server, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOLIT_BASE_DIR", str(tmp_path / "base"))
    digest = hashlib.sha256(_zip()).hexdigest()
    with pytest.raises(ValueError, match="sha256 .*, expected 00.*nothing kept"):
        fetch_core_bundle(f"{server}/eval_bundle.zip", sha256="00" * 32)
    with pytest.raises(ValueError, match="is not a zip file"):
        fetch_core_bundle(f"{server}/not_a.zip")
    with pytest.raises(ConnectionError, match="could not download"):
        fetch_core_bundle(f"{server}/missing.zip")
    assert not core_bundle_dir().exists() and not list(core_bundle_dir().parent.glob("eval_bundle*"))
    d = fetch_core_bundle(f"{server}/eval_bundle.zip", sha256=digest)
    assert json.loads((d / "SOURCE.json").read_text())["sha256"] == digest
    tasks = load_core_bundle()
    assert [(t["label"], t["type"], t["shots"], t["baseline"]) for t in tasks] == [
        ("piqa", "multiple_choice", 1, 0.5), ("lambada_openai", "language_modeling", 0, 0.0),
        ("winograd", "schema", 0, 0.5)]

    tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=300)
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=64, vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_kv_head=2,
                                  n_embd=32), "cpu").eval()
    res = eval_base(model, tok)                  # the bundle is there and no tasks are named: the official path
    # by hand: each item's correctness, its task's accuracy, centered on the bundle's baseline, averaged
    centered = []
    for t in tasks:
        hits = [evaluate_core_item(model, tok, t["type"], it, [t["items"][j] for j in
                                   fewshot_indices(len(t["items"]), i, t["shots"], 1234)], t["delim"])
                for i, it in enumerate(t["items"])]
        acc = sum(hits) / len(hits)
        centered.append((acc - t["baseline"]) / (1 - t["baseline"]))
    assert res["core"] == pytest.approx(sum(centered) / len(centered), abs=1e-12)
    assert res["eval"] == "official bundle: 3 of 22 tasks" and res["missing"] == []
    assert base_title(res).startswith(f"CORE {res['core']:.4f} (official bundle: 3 of 22 tasks)")
    assert fetch_core_bundle(f"{server}/gone.zip") == d   # already there: kept, nothing downloaded
    rebuilt = eval_base(model, tok, official=False)
    assert rebuilt["eval"].startswith("offline rebuild: 0 of 22 tasks")
