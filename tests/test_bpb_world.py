"""Val bits per byte does not depend on the layout: the training loop's periodic eval scores the same val rows at any
number of data ranks (1, 3, 4; naive dp, FSDP2 whose forwards are collective, tp x dp), and the exact-once eval of the
whole val split (`evaluate_bpb_exact`) gives the same number, and exactly the split's UTF-8 byte count, at world 1, 2, 3.
Forked gloo ranks (`run_distributed`), float64 so that only the token set, not rounding, can differ."""
import math
import os

import pytest
import torch

from nanolit.parallel.mesh import run_distributed
from _helpers import fp64

SMALL = dict(depth=2, sequence_len=32, device_batch_size=2, eval_every=1, eval_tokens=512, progress=False,
             num_iterations=1, sample_every=-1, loader_buffer=8)


def _val_docs(base):
    from nanolit.data import iter_documents
    return list(iter_documents("val", data_dir=os.path.join(base, "data"), epochs=1))


def _exact(base, batch_size):
    from nanolit.eval import evaluate_bpb_exact
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import get_tokenizer
    with fp64(base):
        tok = get_tokenizer(os.path.join(base, "tokenizer"))
        torch.manual_seed(0)
        m = build_model(GPTConfig(n_layer=2, n_head=2, n_kv_head=2, n_embd=32, vocab_size=tok.vocab_size, sequence_len=64,
                                  window_pattern="L"), "cpu").eval()
        for p in m.parameters(): p.data.normal_(0, 0.3)
        return evaluate_bpb_exact(m, tok, _val_docs(base), batch_size=batch_size)


def test_exact_once_same_at_any_world(tiny_base_dir):
    base = str(tiny_base_dir)
    docs = _val_docs(base)
    ref = _exact(base, 3)
    assert ref["bytes"] == sum(len(d.encode("utf-8")) for d in docs) and ref["docs"] == len(docs) == 20
    for world in (2, 3):
        for out in run_distributed(_exact, world, base, 3, timeout=300):
            assert (out["bytes"], out["tokens"], out["docs"]) == (ref["bytes"], ref["tokens"], ref["docs"])
            assert out["bpb"] == pytest.approx(ref["bpb"], rel=1e-12)


def _train(base, tag, **kw):
    from nanolit.train import TrainConfig, train
    with fp64(base): res = train(TrainConfig(tag=tag, **SMALL, **kw))
    return res["history"]["val"], res["val_exact"]


_REF = {}


@pytest.mark.parametrize("world,kw", [(3, {}), (4, {}), (3, dict(dp_mode="fsdp2")), (4, dict(tp=2))])
def test_periodic_val_same_tokens_at_any_world(tiny_base_dir, world, kw):
    base = str(tiny_base_dir)
    if "ref" not in _REF: _REF["ref"] = _train(base, "bpb_ref")          # one process
    ref_val, ref_exact = _REF["ref"]
    outs = run_distributed(_train, world, base, f"bpb_{world}_{'_'.join(map(str, kw.values()))}", timeout=300, **kw)
    true_bytes = sum(len(d.encode("utf-8")) for d in _val_docs(base))
    assert ref_exact["bytes"] == true_bytes
    for val, exact in outs:
        # step 0: the same untrained model on every layout, so the same number iff the same tokens are scored
        assert val[0]["step"] == 0 and val[0]["bpb"] == pytest.approx(ref_val[0]["bpb"], rel=1e-12), (val[0], ref_val[0])
        assert exact["bytes"] == true_bytes and exact["docs"] == 20   # the final eval: the whole split, each byte once
        assert math.isfinite(exact["bpb"])


def _eval_base(base):
    from nanolit.evaluate import eval_base
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import get_tokenizer
    with fp64(base):
        os.environ["NANOLIT_BASE_DIR"] = base
        tok = get_tokenizer(os.path.join(base, "tokenizer"))
        torch.manual_seed(0)
        m = build_model(GPTConfig(n_layer=2, n_head=2, n_kv_head=2, n_embd=32, vocab_size=tok.vocab_size, sequence_len=64,
                                  window_pattern="L"), "cpu").eval()
        for p in m.parameters(): p.data.normal_(0, 0.3)
        return eval_base(m, tok, tasks=[])


def test_eval_cli_base_bpb_is_exact_once(tiny_base_dir):
    "`python -m nanolit.evaluate base`'s bpb (eval_base) is the exact-once number over the whole val split, at world 1 and 2."
    base = str(tiny_base_dir)
    one = _eval_base(base)
    assert one["bpb_exact"]["bytes"] == sum(len(d.encode("utf-8")) for d in _val_docs(base))
    assert one["bpb"] == pytest.approx(_exact(base, 8)["bpb"], rel=1e-12)
    for r in run_distributed(_eval_base, 2, base, timeout=120):
        assert r["bpb_exact"]["bytes"] == one["bpb_exact"]["bytes"] and r["bpb"] == pytest.approx(one["bpb"], rel=1e-12)
