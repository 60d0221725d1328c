"""The chat web server: the page driven in headless Chromium (Debian's /usr/bin/chromium via playwright): type a
message, see the streamed reply, the sampling controls, the checkpoint and load line, calculator calls shown as such,
Esc and the Stop button ending a reply, reset, and a screenshot of the finished conversation kept as an artifact
(build/test-artifacts/web_chat.png; skips if chromium or the playwright package is missing: `apt-get install -y
chromium`, `pip install playwright`; no `playwright install` needed); 16 clients with different prompts served by one
continuous batch, each reply equal to its prompt alone at temperature 0 (float64); clients that disconnect, while
queued or while streaming, against a real uvicorn server on 127.0.0.1 with raw sockets; bad request bodies (deep
nesting, huge integers, NaN, wrong types) get one clear 4xx line, and a client gone mid-body is counted."""
import json
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import torch

CHROMIUM = os.environ.get("NANOLIT_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def tiny():
    from nanolit.core import sample_texts
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import Tokenizer
    torch.set_num_threads(1)
    tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=320)
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=256, vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_kv_head=2,
                                  n_embd=32), "cpu").eval()
    return model, tok


CKPT = dict(stage="sft", tag="d4", step=150)
ARTIFACTS = Path(__file__).resolve().parents[1] / "build" / "test-artifacts"


@pytest.fixture(scope="module")
def chat_server(tiny):
    from nanolit.chat import ChatSession, create_app, start_server
    model, tok = tiny
    server, url = start_server(create_app(model, tok, defaults=dict(temperature=0, max_tokens=24), checkpoint=CKPT))
    slow, slow_url = start_server(create_app(model, tok, engine=slow_engine(model, tok, 0.05), checkpoint=CKPT,
                                             defaults=dict(temperature=0, max_tokens=400)))
    expected = ChatSession(model, tok, temperature=0, max_tokens=24).send("Hail, Caesar!")
    yield url, slow_url, expected
    for s in (server, slow):
        s.should_exit = True
        s.thread.join(5)


def test_page_in_headless_chromium(chat_server):
    missing = None
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        missing = f"no chromium at {CHROMIUM}: `apt-get install -y chromium` (Debian) to run this test"
    try: from playwright import sync_api
    except ImportError: missing = missing or "pip install playwright (no `playwright install` needed)"
    if missing:
        if os.environ.get("CI"): pytest.fail(f"CI must run the browser test: {missing} (.ci/run installs both)")
        pytest.skip(missing)
    url, slow_url, expected = chat_server
    assert expected.strip(), "the greedy reply of the test model should not be blank"
    idle = "document.querySelector('#chat').dataset.state === 'idle'"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport=dict(width=900, height=800))
            page.goto(url + "/")
            # what is served and the load, from /health; the sampling controls start at the server's defaults
            page.wait_for_function("document.querySelector('#ckpt').textContent.includes('step')", timeout=10_000)
            assert page.inner_text("#ckpt") == "sft/d4 step 150"
            assert page.inner_text("#load").startswith("0 of 8 rows, 0 waiting")
            assert (page.input_value("#temperature"), page.input_value("#max_tokens")) == ("0", "24")
            page.fill("#input", "Hail, Caesar!")
            page.click("#send")
            page.wait_for_function(idle + " && document.querySelectorAll('#chat .assistant').length === 1",
                                   timeout=30_000)
            assert page.locator("#chat .user").inner_text() == "Hail, Caesar!"
            assert page.eval_on_selector("#chat .assistant", "e => e.dataset.raw") == expected
            assert page.locator("#chat .error").count() == 0
            assert page.input_value("#input") == ""
            # a second turn (Enter sends) with the controls changed: the request carries them
            page.fill("#max_tokens", "5")
            page.fill("#input", "Speak again")
            page.keyboard.press("Enter")
            page.wait_for_function(idle + " && document.querySelectorAll('#chat .assistant').length === 2",
                                   timeout=30_000)
            assert page.locator("#chat .error").count() == 0
            assert "(stopped at max tokens)" in page.locator("#chat .assistant").nth(1).inner_text()
            # calculator calls and their results are shown as such (text nodes only: no markup from the model)
            tools = page.evaluate("""() => { const d = document.createElement('div');
                render(d, 'It is<|python_start|>12*7<|python_end|><|output_start|>84<|output_end|> so <b>84</b>.');
                return [d.querySelector('.tool').textContent, d.querySelector('.tool-out').textContent,
                        d.textContent, d.querySelectorAll('b').length]; }""")
            assert tools == ["calculator: 12*7", "= 84", "It iscalculator: 12*7= 84 so <b>84</b>.", 0], tools
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web_chat.png"), full_page=True)  # the finished conversation
            assert (ARTIFACTS / "web_chat.png").stat().st_size > 5000
            page.click("#reset")
            assert page.locator("#chat .msg").count() == 0
            # a long reply (400 tokens x 50 ms) ended by Esc, then one by the Stop button: the row is freed each time
            page.goto(slow_url + "/")
            for stop in (lambda: page.keyboard.press("Escape"), lambda: page.click("#stop")):
                page.fill("#input", "Speak at length")
                page.keyboard.press("Enter")
                page.wait_for_function("document.querySelector('#chat .assistant:last-child').dataset.raw.length > 0",
                                       timeout=10_000)
                assert page.is_enabled("#stop")
                stop()
                page.wait_for_function(idle, timeout=5_000)
                assert "(stopped)" in page.locator("#chat .assistant").last.inner_text()
                _wait_for(lambda: _health(slow_url)["running"] == 0, "the stopped reply's row to be freed")
            assert page.locator("#chat .error").count() == 0
        finally:
            browser.close()


def _health(url):
    import httpx
    return httpx.get(url + "/health", timeout=5).json()


class SlowLM(torch.nn.Module):
    "A model `dt` seconds slower per forward (prefill or decode step): replies long enough to queue behind and hang up on."
    def __init__(self, inner, dt=0.02):
        super().__init__()
        self.inner, self.dt, self.config, self.windows = inner, dt, inner.config, inner.windows
    def forward(self, idx, kv_cache=None):
        time.sleep(self.dt)
        return self.inner(idx, kv_cache=kv_cache)


def slow_engine(model, tok, dt=0.02):
    "An Engine over SlowLM with no stop tokens: every reply runs to its max_tokens."
    from nanolit.engine import Engine
    return Engine(SlowLM(model, dt), tok, stop_tokens=set())


def _open_stream(url, max_tokens):
    "POST /chat/completions on a raw socket (so the test can hang up at will); returns the socket."
    u = urlsplit(url)
    body = json.dumps(dict(messages=[dict(role="user", content="Hail")], max_tokens=max_tokens)).encode()
    s = socket.create_connection((u.hostname, u.port), timeout=5)
    s.sendall(b"POST /chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (u.netloc.encode(), len(body), body))
    return s


def _read_until(s, needle, timeout=5.0):
    buf, t0 = b"", time.monotonic()
    while needle not in buf:
        assert time.monotonic() - t0 < timeout, f"no {needle!r} within {timeout}s; got {buf[-200:]!r}"
        chunk = s.recv(4096)
        assert chunk, f"connection closed before {needle!r}; got {buf[-200:]!r}"
        buf += chunk
    return buf


def _wait_for(pred, what, timeout=5.0):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_disconnected_clients_are_not_generated(tiny):
    """One row: A streams (holds it), B queues, B hangs up -> B leaves the queue and is never prefilled; A hangs up
    mid-stream -> its row is freed within a few tokens; C then gets a whole reply. The counters (app.state.stats,
    /health) and the log say so, one line per abort."""
    import logging
    import httpx
    from nanolit.chat import create_app, parse_sse, start_server
    model, tok = tiny
    app = create_app(model, tok, engine=slow_engine(model, tok), max_concurrent=1, max_queue=4, disconnect_poll=0.02)
    st, loop = app.state.stats, app.state.engine_loop
    records = []
    handler = logging.Handler(); handler.emit = records.append
    logger = logging.getLogger("nanolit.chat"); logger.addHandler(handler); level = logger.level; logger.setLevel(logging.INFO)
    server, url = start_server(app)
    a = b = None
    try:
        a = _open_stream(url, 500)                     # 500 tokens x 20 ms: streams for 10 s unless stopped
        _read_until(a, b'data: {"token"')
        b = _open_stream(url, 500)
        _wait_for(lambda: loop.stats()["waiting"] == 1, "B to queue")
        time.sleep(0.1)
        assert loop.stats()["admitted"] == 1 and loop.stats()["rows"] == 1
        b.close()                                      # B leaves while waiting for a row
        _wait_for(lambda: st["aborted_waiting"] == 1 and loop.stats()["waiting"] == 0, "B's abort to be counted")
        n_before, t_close = loop.tokens, time.monotonic()
        a.close()                                      # A leaves mid-stream
        _wait_for(lambda: loop.stats()["rows"] == 0, "A's row to be freed")
        assert loop.tokens - n_before <= 10, loop.tokens - n_before   # ~2 polls of 20 ms, not the 500 asked for
        assert time.monotonic() - t_close < 1.0
        assert st["aborted_streaming"] == 1 and st["completed"] == 0
        r = httpx.post(url + "/chat/completions", json=dict(messages=[dict(role="user", content="Hail")], max_tokens=3),
                       timeout=10)                     # C: the row is free and serves a whole reply
        assert r.status_code == 200 and parse_sse(r.text)[1] == [] and '"finish_reason": "length"' in r.text
        assert loop.stats()["admitted"] == 2, "B must never have been prefilled"
        h = httpx.get(url + "/health", timeout=5).json()
        assert (h["completed"], h["aborted_waiting"], h["aborted_streaming"], h["running"], h["waiting"]) == (1, 1, 1, 0, 0)
        msgs = [r.getMessage() for r in records]
        assert [m.split(":")[0] for m in msgs] == ["client left while waiting for a row", "client left while streaming"], msgs
    finally:
        for s_ in (a, b):
            if s_ is not None: s_.close()
        logger.removeHandler(handler); logger.setLevel(level)
        server.should_exit = True; server.thread.join(5)


def test_sixteen_clients_one_batch(tiny, monkeypatch):
    """16 clients at once with different prompts, 8 rows decoded together and the rest queued: every one is served
    (bounded: 60 s each), and each reply equals its prompt generated alone at temperature 0. float64, so that a
    near-tie can't flip a greedy token between batch sizes (08 explains why float32 can)."""
    import copy
    import httpx
    from concurrent.futures import ThreadPoolExecutor
    from nanolit.chat import ChatSession, create_app, parse_sse, start_server
    model, tok = tiny
    monkeypatch.setenv("NANOLIT_DTYPE", "float64")
    m64 = copy.deepcopy(model).double()
    app = create_app(m64, tok, max_concurrent=8, max_queue=16, defaults=dict(temperature=0, max_tokens=20))
    server, url = start_server(app)
    prompts = [f"Citizen {i}, speak{'!' * (i % 5)} " + "and more " * (i % 4) for i in range(16)]
    try:
        def ask(p):
            r = httpx.post(url + "/chat/completions", json=dict(messages=[dict(role="user", content=p)]), timeout=60)
            return r.status_code, parse_sse(r.text)
        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as ex:
            results = list(ex.map(ask, prompts))
        wall = time.monotonic() - t0
        assert [c for c, _ in results] == [200] * 16
        assert [e for _, (_, e) in results] == [[]] * 16
        solo = [ChatSession(m64, tok, temperature=0, max_tokens=20).send(p) for p in prompts]
        assert [txt for _, (txt, _) in results] == solo
        s = app.state.engine_loop.stats()
        assert s["admitted"] == 16 and s["rows"] == 0 and s["waiting"] == 0
        assert s["steps"] < 16 * 20, s                 # rows shared steps: fewer steps than tokens
        assert wall < 60, wall
    finally:
        server.should_exit = True; server.thread.join(5)


_CONV = '[{"role": "user", "content": "Hail"}]'
BAD_BODIES = [   # (name, body, status, a word the one-line error must contain)
    ("deep nesting", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
    ("deep nesting in a field", b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "nested too deeply"),
    ("5000-digit seed", b'{"messages": %s, "seed": %s}' % (_CONV.encode(), b"9" * 5000), 400, "digits"),
    ("4000-digit seed", b'{"messages": %s, "seed": %s}' % (_CONV.encode(), b"9" * 4000), 422, "seed"),
    ("4000-digit max_tokens", b'{"messages": %s, "max_tokens": %s}' % (_CONV.encode(), b"9" * 4000), 422, "max_tokens"),
    ("NaN temperature", b'{"messages": %s, "temperature": NaN}' % _CONV.encode(), 422, "temperature"),
    ("inf temperature", b'{"messages": %s, "temperature": Infinity}' % _CONV.encode(), 422, "temperature"),
    ("1e400 temperature", b'{"messages": %s, "temperature": 1e400}' % _CONV.encode(), 422, "temperature"),
    ("string temperature", b'{"messages": %s, "temperature": "hot"}' % _CONV.encode(), 422, "temperature"),
    ("negative max_tokens", b'{"messages": %s, "max_tokens": -5}' % _CONV.encode(), 422, "max_tokens"),
    ("float top_k", b'{"messages": %s, "top_k": 2.5}' % _CONV.encode(), 422, "top_k"),
    ("NaN top_k", b'{"messages": %s, "top_k": NaN}' % _CONV.encode(), 422, "top_k"),
    ("bool max_tokens", b'{"messages": %s, "max_tokens": true}' % _CONV.encode(), 422, "max_tokens"),
    ("messages a string", b'{"messages": "hi"}', 400, "messages"),
    ("messages an object", b'{"messages": {"role": "user", "content": "hi"}}', 400, "messages"),
    ("no messages", b'{}', 400, "messages"),
    ("message not an object", b'{"messages": ["hi"]}', 400, "message 0"),
    ("content a number", b'{"messages": [{"role": "user", "content": 5}]}', 400, "string"),
    ("content NaN", b'{"messages": [{"role": "user", "content": NaN}]}', 400, "string"),
    ("role invalid", b'{"messages": [{"role": "root", "content": "x"}]}', 400, "role"),
    ("role a list", b'{"messages": [{"role": ["user"], "content": "x"}]}', 400, "role"),
    ("role 100k characters", b'{"messages": [{"role": "%s", "content": "x"}]}' % (b"r" * 100_000), 400, "characters"),
    ("content 100k characters", b'{"messages": [{"role": "user", "content": "%s"}]}' % (b"c" * 100_000), 413, "limit"),
    ("body a list", b'[1]', 400, "JSON object"),
    ("empty body", b'', 400, "malformed JSON"),
    ("bad UTF-8", b'{"messages": [{"role": "user", "content": "\xff"}]}', 400, "malformed JSON"),
]


@pytest.mark.parametrize("name,body,status,needle", BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_bad_bodies_get_one_clear_4xx_line(tiny, name, body, status, needle):
    """Bad input gets one clear line: a 4xx JSON {"error": one short line}, never a 500. Deep nesting
    (RecursionError in json.loads) and a 5000-digit integer (ValueError: Python's int digit limit) used to be 500s."""
    from fastapi.testclient import TestClient
    from nanolit.chat import create_app
    model, tok = tiny
    with TestClient(create_app(model, tok), raise_server_exceptions=False) as client:
        r = client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, (r.status_code, r.text[:300])
    msg = r.json()["error"]
    assert isinstance(msg, str) and "\n" not in msg and len(msg) <= 300, msg
    assert needle in msg, msg


def test_client_gone_while_sending_its_body(tiny):
    """A client that declares Content-Length: 1000 and hangs up after 7 bytes: counted in
    app.state.stats["aborted_reading"] (and /health), one INFO line on nanolit.chat, no ERROR (the ClientDisconnect
    traceback uvicorn used to log); nothing is generated and the server keeps serving."""
    import logging
    import httpx
    from nanolit.chat import create_app, parse_sse, start_server
    model, tok = tiny
    app = create_app(model, tok, engine=slow_engine(model, tok, 0.0))
    st = app.state.stats
    records = []
    handler = logging.Handler(); handler.emit = records.append
    loggers = [logging.getLogger(n) for n in ("nanolit.chat", "uvicorn.error", "uvicorn", "")]
    levels = [lg.level for lg in loggers]
    for lg in loggers: lg.addHandler(handler)
    loggers[0].setLevel(logging.INFO)
    server, url = start_server(app)
    try:
        u = urlsplit(url)
        s = socket.create_connection((u.hostname, u.port), timeout=5)
        s.sendall(b"POST /chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"messa" % u.netloc.encode())
        time.sleep(0.2)
        s.close()
        _wait_for(lambda: st.get("aborted_reading") == 1, "the abort while reading the body to be counted")
        time.sleep(0.2)                                # any traceback would be logged by now
        r = httpx.post(url + "/chat/completions", json=dict(messages=[dict(role="user", content="Hail")], max_tokens=3),
                       timeout=10)
        assert r.status_code == 200 and parse_sse(r.text)[1] == []
        assert app.state.engine_loop.stats()["admitted"] == 1, "the client that hung up must never have been generated"
        h = httpx.get(url + "/health", timeout=5).json()
        assert (h["aborted_reading"], h["aborted_waiting"], h["aborted_streaming"], h["completed"]) == (1, 0, 0, 1)
        records = list({id(r): r for r in records}.values())   # seen once per logger it propagates through
        errors = [f"{r.name}: {r.getMessage()}" for r in records if r.levelno >= logging.WARNING]
        assert not errors, errors
        infos = [r.getMessage() for r in records if r.name == "nanolit.chat"]
        assert len(infos) == 1 and infos[0].startswith("client left while sending its request"), infos
    finally:
        for lg, lv in zip(loggers, levels): lg.removeHandler(handler); lg.setLevel(lv)
        server.should_exit = True; server.thread.join(5)


def test_a_failing_request_does_not_stop_the_loop(tiny):
    """A model whose vocabulary is larger than its tokenizer's samples ids the tokenizer can't decode: that request
    ends with one {"error": ...} line and [DONE], the engine loop keeps running, and the next request is served."""
    import httpx
    from nanolit.chat import create_app, parse_sse, start_server
    from nanolit.engine import Engine
    from nanolit.model import GPTConfig, build_model
    model, tok = tiny
    torch.manual_seed(1)
    wide = build_model(GPTConfig(sequence_len=64, vocab_size=tok.vocab_size + 200, n_layer=1, n_head=2, n_kv_head=2,
                                 n_embd=16), "cpu").eval()
    with torch.no_grad():
        wide.lm_head.weight[tok.vocab_size:] += 5.0        # the undecodable ids are the likely ones
    server, url = start_server(create_app(wide, tok, engine=Engine(wide, tok, stop_tokens=set())))
    try:
        body = dict(messages=[dict(role="user", content="Hail")], max_tokens=8, temperature=1.0)
        r = httpx.post(url + "/chat/completions", json=body, timeout=30)
        _, errors = parse_sse(r.text)
        assert r.status_code == 200 and len(errors) == 1 and "KeyError" in errors[0], r.text[-300:]
        assert r.text.endswith("data: [DONE]\n\n")
        _wait_for(lambda: _health(url)["running"] == 0, "the failed request's row to be freed")
        assert _health(url)["waiting"] == 0
        _wait_for(lambda: _health(url)["failed"] == 1, "the failed reply to be counted")
        r2 = httpx.post(url + "/chat/completions", json=body, timeout=30)   # served again (and fails the same way)
        assert r2.status_code == 200 and len(parse_sse(r2.text)[1]) == 1
        _wait_for(lambda: _health(url)["failed"] == 2, "the second failed reply to be counted")
        assert _health(url)["completed"] == 0          # a reply that ended in an error is not a completed one
    finally:
        server.should_exit = True; server.thread.join(5)
