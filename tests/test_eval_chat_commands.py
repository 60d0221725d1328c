"""The eval and chat commands run the same `main` two ways: `python -m nanolit.<module>` and a console script
(`nanolit-eval = "nanolit.evaluate:main"`, `nanolit-chat = "nanolit.chat:main"`), which imports the module and calls
`main()` with `sys.argv` set. The console script is run as the wrapper file pip writes for an entry point, so the test
needs no installed scripts. Nothing here downloads: the eval data is written inline."""
import json
import os
import subprocess
import sys

WRAPPER = """import re
import sys
from nanolit.{module} import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def _run(cmd, base):
    env = {**os.environ, "NANOLIT_BASE_DIR": str(base), "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _ways(module, tmp_path):
    "The two command lines of `module`: `python -m` and the console-script wrapper."
    script = tmp_path / f"nanolit-{module}"
    script.write_text(WRAPPER.format(module=module))
    return {"-m": [sys.executable, "-m", f"nanolit.{module}"], "script": [sys.executable, str(script)]}


def test_eval_command_both_ways(tmp_path):
    base = tmp_path / "base"
    (base / "eval_data").mkdir(parents=True)
    piqa = [dict(query="Question: how?\nAnswer:", choices=["a", "b"], gold=1)] * 3
    (base / "eval_data" / "piqa.jsonl").write_text("".join(json.dumps(x) + "\n" for x in piqa))
    for way, cmd in _ways("evaluate", tmp_path).items():
        r = _run(cmd + ["data", "--tasks", "piqa,winograd", "--bigbench", "false"], base)  # built or no source: kept
        assert r.returncode == 0, (way, r.stderr[-2000:])
        assert "piqa 3" in r.stdout, (way, r.stdout)
        bad = _run(cmd + ["base", "--tasks", "piqa,bogus"], base)
        assert bad.returncode == 2 and bad.stderr.startswith("error: unknown base task(s) ['bogus']"), (way, bad.stderr)
        none = _run(cmd + ["chat", "--device", "cpu"], base)  # no checkpoint at all: one line naming the fix
        assert none.returncode == 2 and "python -m nanolit.sft" in none.stderr, (way, none.stderr[-2000:])
        assert "Traceback" not in none.stderr
    help_ = _run(cmd + ["--help"], base)
    assert help_.returncode == 0 and "{base,chat,data,bundle}" in help_.stdout and "--max-per-task" in help_.stdout
    assert "build the eval data" in help_.stdout  # the parameters' comments are the help


def test_chat_command_both_ways(tmp_path):
    for way, cmd in _ways("chat", tmp_path).items():
        r = _run(cmd + ["--stage", "rl", "--tag", "none", "-p", "hi", "--device", "cpu"], tmp_path)
        assert r.returncode != 0 and "python -m nanolit.rl --tag none" in r.stderr, (way, r.stderr[-2000:])
        assert "Traceback" not in r.stderr
    help_ = _run(cmd + ["--help"], tmp_path)
    assert help_.returncode == 0 and "--web" in help_.stdout and "--temperature" in help_.stdout


def test_chat_refuses_terminal_options_with_web(tmp_path):
    "`-p` and `--system` belong to the terminal chat: with `--web` they would be dropped, so the command refuses them."
    cmd = _ways("chat", tmp_path)["-m"]
    for extra, name in ((["-p", "hi"], "--prompt"), (["--system", "be brief"], "--system")):
        r = _run(cmd + ["--web", *extra], tmp_path)
        assert r.returncode == 2 and f"{name} is for the terminal chat" in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr
