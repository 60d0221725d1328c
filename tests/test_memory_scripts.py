"""The GPU scripts' own configurations pass the pre-flight memory check on an 80 GB GPU (bf16): their arguments are
parsed from runs/speedrun.sh and runs/slurm.sbatch, so the test follows the scripts."""
import re
from pathlib import Path

import pytest

from nanolit.train import TrainConfig, check_memory, train_memory_bytes

ROOT = Path(__file__).resolve().parents[1]
GPU_BYTES = 80e9          # "80 GB": an H100 reports 79.6 GiB = 85.5e9 bytes, so this is the stricter reading


def _train_args(script: str) -> tuple[dict, dict]:
    "The `-m nanolit.train` options of a script (shell defaults like ${DEPTH:-20} resolved) and its variables."
    text = (ROOT / script).read_text().replace("\\\n", " ")
    env = dict(re.findall(r'^(\w+)=\$\{\w+:-([^}]*)\}', text, flags=re.M))
    def expand(v): return re.sub(r'\$\{?(\w+)(?::-([^}]*))?\}?', lambda m: env.get(m[1], m[2] or ""), v.strip('"'))
    line = next(l for l in text.splitlines() if "-m nanolit.train" in l)
    opts = dict(re.findall(r'--([\w-]+)\s+("[^"]*"|\S+)', line.split("-m nanolit.train", 1)[1]))
    return {k.replace("-", "_"): expand(v) for k, v in opts.items()}, env


def _vocab() -> int:
    "The vocabulary the speedrun trains its tokenizer with (the Slurm job trains on the same base dir)."
    return int(re.search(r"nanolit\.tokenizer .*--vocab-size (\d+)", (ROOT / "runs/speedrun.sh").read_text())[1])


@pytest.mark.parametrize("script,gpus", [("runs/speedrun.sh", 8), ("runs/slurm.sbatch", 16)])
def test_script_fits_80gb(script, gpus):
    opts, env = _train_args(script)
    fields = {f: int(opts[f]) for f in ("depth", "head_dim", "sequence_len", "device_batch_size", "total_batch_size")}
    cfg = TrainConfig(**fields)
    assert cfg.depth >= 20 and cfg.sequence_len == 2048, opts            # the parse found the real run
    need = train_memory_bytes(cfg, _vocab(), dp_size=gpus, bytes_per_el=2)
    assert check_memory(need, GPU_BYTES, script) is None, f"{script}: {need / 2**30:.1f} GiB per GPU"
    # and the batch still divides over the GPUs with accumulation
    assert cfg.total_batch_size % (cfg.device_batch_size * cfg.sequence_len * gpus) == 0
