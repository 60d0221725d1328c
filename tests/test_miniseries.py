"""runs/miniseries.sh end to end, offline, at toy scale: a tiny corpus and tokenizer built here (no network, BUILD=0),
2 depths at one compute budget and one tokens-per-parameter series, a few steps each (3 runs, one skipped). The script plans with
`nanolit.scaling plan` (steps = C / (FLOPs per token x tokens a step)), skips what is too short or too long with a line,
trains each run with `nanolit.train`, appends it to the results CSV, and a rerun trains nothing (every run is in the
file). The fit code (11a_scaling) reads the file it wrote."""
import csv
import json
import math
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("miniseries")
    env = {**os.environ, "NANOLIT_BASE_DIR": str(base), "OMP_NUM_THREADS": "1"}
    prep = """
import os
from pathlib import Path
from nanolit.core import sample_texts
from nanolit.data import write_shards
from nanolit.tokenizer import Tokenizer
base = Path(os.environ["NANOLIT_BASE_DIR"])
docs = [p for t in sample_texts().values() for p in t.split("\\n\\n\\n") if p.strip()]
write_shards(docs[:-20], base / "data", "train")
write_shards(docs[-20:], base / "data", "val")
Tokenizer.train_from_iterator(iter(docs), vocab_size=300).save(base / "tokenizer")
"""
    subprocess.run([str(ROOT / ".venv/bin/python"), "-c", prep], env=env, check=True, timeout=300)
    knobs = dict(MODE="cpu", BUILD="0", DEPTHS="1 2", BUDGETS="1.2e9", RATIOS="0.02", VOCAB="300", SEQ="64",
                 DEVICE_BATCH="2", TOKENS_PER_STEP="128", MIN_STEPS="2", MAX_STEPS="30", EVAL_TOKENS="1024",
                 RESULTS=str(base / "sweep" / "toy.csv"))  # fmt: skip
    run = lambda: subprocess.run(  # noqa: E731
        ["bash", str(ROOT / "runs/miniseries.sh")], env={**env, **knobs}, capture_output=True, text=True, timeout=600
    )
    first = run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    rows = list(csv.DictReader(open(knobs["RESULTS"])))
    second = run()
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    return base, first.stdout, second.stdout, rows, list(csv.DictReader(open(knobs["RESULTS"])))


def test_the_sweep_runs_and_records(sweep):
    base, out, _, rows, _ = sweep
    from nanolit.scaling import model_shape
    tags = [r["tag"] for r in rows]
    assert tags == ["iso1.2e9_d1_s42", "iso1.2e9_d2_s42", "opt_r0.02_d1_s42"], out  # 20, 3 and 11 steps
    assert "skip opt_r0.02_d2_s42" in out and "> max_steps 30" in out  # 0.02 N at depth 2: 68 steps of 128 tokens
    for r in rows:
        res = json.loads((base / "checkpoints/base" / r["tag"] / "train_result.json").read_text())
        shape = model_shape(int(r["depth"]), 300, 64)
        assert int(r["n_params"]) == shape["n_params"] and float(r["flops_per_token"]) == shape["flops_per_token"]
        assert int(r["steps"]) == res["num_steps"] and int(r["tokens"]) == res["num_steps"] * 128
        assert float(r["flops"]) == int(r["tokens"]) * shape["flops_per_token"]
        assert float(r["val_bpb"]) == res["final_val_bpb"] and r["final_eval"] == "rows"  # the periodic rows
        assert float(r["wall_s"]) > 0 and float(r["train_loss"]) > 0
        if r["series"] == "isoflop":  # the budget is spent to within one step
            assert abs(float(r["flops"]) - float(r["target"])) <= 128 * shape["flops_per_token"] / 2
        assert not list((base / "checkpoints/base" / r["tag"]).glob("step_*"))  # KEEP=0: the result stays, weights go
    assert "no fit yet" in out  # 2 depths a budget: no isoFLOP parabola


def test_a_rerun_trains_nothing(sweep):
    _, _, again, rows, rows_again = sweep
    assert rows_again == rows
    assert "== run" not in again and again.count("done: in the results file") == len(rows)


def test_the_fit_reads_the_file(sweep):
    from nanolit.scaling import fit_scaling, isoflop_minima, plot_sweep, read_results
    base, _, _, rows, _ = sweep
    got = read_results(base / "sweep" / "toy.csv")
    assert [r["tag"] for r in got] == [r["tag"] for r in rows] and isinstance(got[0]["flops"], float)
    assert isoflop_minima(got) == []  # 2 depths: a curve needs 3
    with pytest.raises(ValueError, match="a power law needs 2 or more budgets"):
        fit_scaling(got)
    # the file's runs as three depths (the second one twice, its N scaled) of two budgets, losses on a parabola in
    # ln N about the middle depth (lower at the bigger budget): the fit reads these rows and finds the middle
    iso = [r for r in got if r["series"] == "isoflop"]
    iso += [dict(r, n_params=r["n_params"] * 3, depth=3) for r in iso if r["depth"] == 2]
    mid = math.log(iso[1]["n_params"])
    fake = [dict(r, target=r["target"] * k, val_bpb=3 + 0.1 * (math.log(r["n_params"]) - mid) ** 2 - 0.5 * (k > 1))
            for r in iso for k in (1, 3)]  # fmt: skip
    fit = fit_scaling(fake)
    assert len(fit.minima) == 2 and all(m.points == 3 and m.bracketed for m in fit.minima)
    assert all(abs(math.log(m.n_opt) - mid) < 1e-6 for m in fit.minima) and fit.loss_exp < 0
    assert plot_sweep(got, None).axes and plot_sweep(fake, fit).axes
