"""The `chat_widget` driven end to end in JupyterLab in headless Chromium (Debian's /usr/bin/chromium via playwright):
a notebook builds a tiny model and shows the widget, the browser runs it, types a message, presses Send, sees the greedy
reply, presses Reset. The server listens on 127.0.0.1 only, with its home and Jupyter dirs in a tmp dir. Skips if
chromium, the playwright package or jupyterlab is missing (fails instead when $CI is set)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

CHROMIUM = os.environ.get("NANOLIT_CHROMIUM", "/usr/bin/chromium")
MESSAGE = "Hail, Caesar!"
# server, kernel and browser keep their home and caches in the test's tmp dir, not in ~
_HOME_DIRS = dict(HOME="home", XDG_CACHE_HOME="cache", XDG_CONFIG_HOME="xdg-config", XDG_DATA_HOME="xdg-data")

SETUP = """\
import torch
from nanolit.chat import chat_widget
from nanolit.core import sample_texts
from nanolit.model import GPTConfig, build_model
from nanolit.tokenizer import Tokenizer
torch.set_num_threads(1)
tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=320)
torch.manual_seed(0)
model = build_model(GPTConfig(sequence_len=256, vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_kv_head=2,
                              n_embd=32), "cpu").eval()
w = chat_widget(model, tok, temperature=0, max_tokens=24)
w"""


def _missing() -> str | None:
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no chromium at {CHROMIUM}: `apt-get install -y chromium` (Debian) to run this test"
    try: import playwright.sync_api  # noqa: F401
    except ImportError: return "pip install playwright (no `playwright install` needed)"
    try: import jupyterlab, ipywidgets, nbformat  # noqa: F401
    except ImportError as e: return f"pip install jupyterlab ipywidgets ({e})"
    return None


def _require():
    missing = _missing()
    if missing:
        if os.environ.get("CI"): pytest.fail(f"CI must run the JupyterLab widget test: {missing}")
        pytest.skip(missing)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]


def _wait_kernel(url: str, timeout: float):
    "Wait until the server has a kernel that is idle with a client (the page) connected."
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with urllib.request.urlopen(url + "/api/kernels", timeout=2) as r: ks = json.load(r)
            if any(k.get("execution_state") == "idle" and k.get("connections", 0) >= 1 for k in ks): return
        except OSError: pass
        time.sleep(0.25)
    raise AssertionError(f"no idle kernel connected to the page within {timeout} s")


@pytest.fixture(scope="module")
def expected_reply():
    "The greedy reply of the same model, computed in the test process."
    from nanolit.chat import ChatSession
    from nanolit.core import sample_texts
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import Tokenizer
    torch.set_num_threads(1)
    tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=320)
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=256, vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_kv_head=2,
                                  n_embd=32), "cpu").eval()
    return ChatSession(model, tok, temperature=0, max_tokens=24).send(MESSAGE)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    "A JupyterLab server on 127.0.0.1 serving a tmp dir that holds chat.ipynb; yields its base url."
    _require()
    import nbformat
    tmp = tmp_path_factory.mktemp("jupyterlab")
    root = tmp / "root"; root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP)])
    nb.metadata["kernelspec"] = dict(name="python3", display_name="Python 3 (ipykernel)", language="python")
    nbformat.write(nb, root / "chat.ipynb")
    dirs = dict(_HOME_DIRS, JUPYTER_CONFIG_DIR="config", JUPYTER_DATA_DIR="data", JUPYTER_RUNTIME_DIR="runtime",
                JUPYTERLAB_SETTINGS_DIR="lab-settings", JUPYTERLAB_WORKSPACES_DIR="lab-workspaces", IPYTHONDIR="ipython")
    env = {**os.environ, **{k: str(tmp / v) for k, v in dirs.items()}, "OMP_NUM_THREADS": "1",
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONUNBUFFERED": "1"}
    for v in dirs.values(): (tmp / v).mkdir(exist_ok=True)
    # no "fetch official Jupyter news?" toast (it could cover the widget); nothing is fetched unless asked anyway
    notif = tmp / "lab-settings" / "@jupyterlab" / "apputils-extension"; notif.mkdir(parents=True)
    (notif / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port = _free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           "--ServerApp.port_retries=0", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0: cmd.append("--allow-root")   # containers, CI
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    def log_tail(): return (tmp / "server.log").read_text(errors="replace")[-3000:]
    try:
        t0 = time.time()
        while True:
            if proc.poll() is not None: pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log_tail()}")
            if time.time() - t0 > 30: pytest.fail(f"jupyter lab did not answer within 30 s:\n{log_tail()}")
            try:
                with urllib.request.urlopen(url + "/api/status", timeout=2) as r:
                    if r.status == 200: break
            except OSError: time.sleep(0.25)
        yield url, log_tail, tmp
    finally:
        proc.terminate()
        try: proc.wait(10)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait(10)
        log.close()


def test_chat_widget_in_jupyterlab(lab, expected_reply):
    from playwright import sync_api
    url, log_tail, tmp = lab
    assert expected_reply.strip(), "the greedy reply of the test model should not be blank"
    with sync_api.sync_playwright() as p:
        # anything but loopback goes to a dead proxy: the page can only reach the lab server
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=127.0.0.1"], env={**os.environ, **{k: str(tmp / v) for k, v in _HOME_DIRS.items()}})
        try:
            page = browser.new_page(viewport=dict(width=1400, height=1000))
            page.goto(url + "/lab/tree/chat.ipynb", timeout=45_000)
            cell = page.locator(".jp-NotebookPanel .jp-CodeCell").first
            cell.wait_for(timeout=45_000)
            # wait until the page is connected to an idle kernel, then run the cell from the Run menu
            _wait_kernel(url, 45)
            page.locator("#jp-main-statusbar", has_text="| Idle").wait_for(timeout=30_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            out = cell.locator(".jp-OutputArea-output")
            text = out.locator(".widget-textarea textarea")
            # should the page still ask which kernel to use, take the preselected one (python3, the notebook's)
            dialog = page.locator(".jp-Dialog .jp-mod-accept", has_text="Select")
            try:
                text.or_(dialog).first.wait_for(timeout=60_000)
                if dialog.is_visible(): dialog.click()
                text.wait_for(timeout=60_000)
            except sync_api.TimeoutError:
                page.screenshot(path=tmp / "no_widget.png")
                raise AssertionError(f"the widget did not render (screenshot: {tmp / 'no_widget.png'}); output: "
                                     f"{out.all_inner_texts()!r}\n{log_tail()}") from None
            view = out.locator(".widget-html-content").first
            text.fill(MESSAGE)
            out.locator("button", has_text="Send").click()
            # done when the view shows the user turn and an assistant turn, and Send is enabled again
            page.wait_for_function(
                """o => { const v = o.querySelector('.widget-html-content');
                           const send = [...o.querySelectorAll('button')].find(b => b.textContent.trim() === 'Send');
                           return v && v.querySelectorAll('.nanolit-user').length === 1 &&
                                  v.querySelectorAll('.nanolit-assistant').length === 1 && send && !send.disabled; }""",
                arg=out.element_handle(), timeout=30_000)
            user = view.locator(".nanolit-user").evaluate("e => e.textContent")
            reply = view.locator(".nanolit-assistant").evaluate("e => e.textContent")
            assert user == "user: " + MESSAGE
            assert reply == "assistant: " + expected_reply
            assert text.input_value() == ""
            out.locator("button", has_text="Reset").click()
            page.wait_for_function("v => v.querySelectorAll('.nanolit-user, .nanolit-assistant').length === 0",
                                   arg=view.element_handle(), timeout=15_000)
        finally:
            browser.close()
