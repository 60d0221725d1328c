"""The tokenizer and data commands run the same `main` two ways: `python -m nanolit.<stage>` and a console script
(`nanolit-tokenizer = "nanolit.tokenizer:main"`, `nanolit-data = "nanolit.data:main"`), which imports the module and
calls `main()` with `sys.argv` set. The console script is run here as the wrapper file pip writes for an entry point,
so the test needs no installed scripts."""
import functools
import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

WRAPPER = """import re
import sys
from nanolit.{module} import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def _run(cmd, base, **kw):
    env = {**os.environ, "NANOLIT_BASE_DIR": str(base), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, **kw)


def _ways(module, tmp_path):
    "The two command lines of `module`: `python -m` and the console-script wrapper."
    script = tmp_path / f"nanolit-{module}"
    script.write_text(WRAPPER.format(module=module))
    return {"-m": [sys.executable, "-m", f"nanolit.{module}"], "script": [sys.executable, str(script)]}


def test_tokenizer_command_both_ways(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text((Path(__file__).parents[1] / "nanolit/assets/shakespeare/sonnets.txt").read_text()[:40_000])
    ranks = {}
    for way, cmd in _ways("tokenizer", tmp_path).items():
        out = tmp_path / f"tok_{way}"
        r = _run(cmd + ["--input", str(text), "--vocab-size", "300", "--out-dir", str(out)], tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "trained vocab 300" in r.stdout
        ranks[way] = (out / "ranks.tiktoken").read_text()
    assert ranks["-m"] == ranks["script"]  # the same code, the same tokenizer
    again = _run(cmd + ["--input", str(text), "--vocab-size", "400", "--out-dir", str(out)], tmp_path)
    assert again.returncode == 2 and again.stderr.startswith("error:") and "--overwrite true" in again.stderr
    help_ = _run(cmd + ["--help"], tmp_path)
    assert help_.returncode == 0 and "--vocab-size" in help_.stdout and "including special tokens" in help_.stdout


def _serve(directory):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def test_data_command_both_ways(tmp_path):
    remote = tmp_path / "remote"
    remote.mkdir()
    for i in range(2):
        pq.write_table(pa.table({"text": [f"document {i} {j}" for j in range(5)]}), remote / f"shard_{i:05d}.parquet")
    srv, url = _serve(remote)
    try:
        for way, cmd in _ways("data", tmp_path).items():
            out = tmp_path / f"data_{way}"
            r = _run(cmd + ["--url", url, "--num-shards", "2", "--data-dir", str(out)], tmp_path)
            assert r.returncode == 0, r.stderr[-2000:]
            assert "downloaded 2 shards" in r.stdout
            assert sorted(p.name for p in out.iterdir()) == ["train_00000.parquet", "val_00001.parquet"]
            assert pq.read_table(out / "val_00001.parquet")["text"].to_pylist()[0] == "document 1 0"
        bad = _run(cmd + ["--size", "huge"], tmp_path)  # the console script: a mode's choices are checked
        assert bad.returncode == 2 and "invalid choice: 'huge'" in bad.stderr
        help_ = _run(cmd + ["--help"], tmp_path)
        assert help_.returncode == 0 and "--num-shards" in help_.stdout and "--force (bool)" in help_.stdout
    finally:
        srv.shutdown()
