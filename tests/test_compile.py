"""`torch.compile` of the GPT on a CPU: loss and every gradient equal eager's (1e-5), the model is one graph (no graph
break: a break splits the compiled step and, on a GPU, a data-dependent one also waits for the device), and a second
process compiling the same model reuses the first one's inductor cache (FX-graph cache hits, no second cold compile).
Small model (depth 2, T 64, every optional piece of issue 16 on: Canon B, smear, backout, QK gain, input-dependent
value-embedding gates, a padded head) so the cold compile takes about a minute; `--compile auto` leaves CPUs eager,
this proves the path works."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, time, torch
from torch._dynamo.utils import counters
from nanolit.model import GPTConfig, build_model
torch.manual_seed(0)
cfg = GPTConfig.from_depth(2, vocab_size=500, sequence_len=64, head_dim=32, canon="B", smear=True, backout=True,
                           qk_gain=True, ve_gate_input=True, pad_vocab_to=64)
model = build_model(cfg, "cpu")
x, y = torch.randint(0, 500, (4, 64)), torch.randint(0, 500, (4, 64))
loss = model(x, y); loss.backward()
eager = {n: p.grad.clone() for n, p in model.named_parameters()}
model.zero_grad(set_to_none=True)
t0 = time.perf_counter()
closs = torch.compile(model, dynamic=False)(x, y); closs.backward()
dt = time.perf_counter() - t0
diff = max(((p.grad - eager[n]).abs().max() / eager[n].abs().max().clamp_min(1e-30)).item()
           for n, p in model.named_parameters() if eager[n].abs().max() > 1e-6)
print(json.dumps(dict(loss=abs(closs.item() - loss.item()), grad=diff, seconds=dt,
                      breaks={k: v for k, v in counters["graph_break"].items()},
                      hits=counters["inductor"]["fxgraph_cache_hit"], misses=counters["inductor"]["fxgraph_cache_miss"])))
'''


def _compile_once(cache):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_compiled_model_equals_eager_and_reuses_the_cache(tmp_path):
    cold = _compile_once(tmp_path / "inductor")
    assert cold["loss"] <= 1e-5 and cold["grad"] <= 1e-5, cold  # relative to each gradient's largest entry
    assert cold["breaks"] == {}, cold["breaks"]  # one graph: nothing in the step falls back to Python
    assert cold["misses"] > 0 and cold["hits"] == 0, cold  # a cold cache compiled the graphs
    warm = _compile_once(tmp_path / "inductor")
    assert warm["hits"] > 0 and warm["misses"] == 0, warm  # the second process took every graph from the cache
    assert warm["loss"] <= 1e-5 and warm["grad"] <= 1e-5, warm
