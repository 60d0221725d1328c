"""The chat web page driven in headless Chromium (Debian's /usr/bin/chromium via playwright): type a message, see the
streamed reply, reset. Skips if chromium or the playwright package is missing (`apt-get install -y chromium`,
`pip install playwright`; no `playwright install` needed)."""
import os
import shutil
from dataclasses import asdict

import pytest
import torch

CHROMIUM = os.environ.get("NANOLIT_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def chat_server():
    from nanolit.chat import ChatSession, create_app, start_server
    from nanolit.core import sample_texts
    from nanolit.model import GPTConfig, build_model
    from nanolit.tokenizer import Tokenizer
    torch.set_num_threads(1)
    tok = Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=320)
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=256, vocab_size=tok.vocab_size, n_layer=2, n_head=2, n_kv_head=2,
                                  n_embd=32), "cpu").eval()
    server, url = start_server(create_app(model, tok, defaults=dict(temperature=0, max_tokens=24)))
    expected = ChatSession(model, tok, temperature=0, max_tokens=24).send("Hail, Caesar!")
    yield url, expected
    server.should_exit = True
    server.thread.join(5)


def test_page_in_headless_chromium(chat_server):
    missing = None
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        missing = f"no chromium at {CHROMIUM}: `apt-get install -y chromium` (Debian) to run this test"
    try: from playwright import sync_api
    except ImportError: missing = missing or "pip install playwright (no `playwright install` needed)"
    if missing:
        if os.environ.get("CI"): pytest.fail(f"CI must run the browser test: {missing} (.ci/run installs both)")
        pytest.skip(missing)
    url, expected = chat_server
    assert expected.strip(), "the greedy reply of the test model should not be blank"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(url + "/")
            page.fill("#input", "Hail, Caesar!")
            page.click("#send")
            page.wait_for_function("document.querySelector('#chat').dataset.state === 'idle' && "
                                   "document.querySelectorAll('#chat .assistant').length === 1", timeout=30_000)
            test_user = page.locator("#chat .user").inner_text()
            reply = page.eval_on_selector("#chat .assistant", "e => e.textContent")
            assert test_user == "Hail, Caesar!"
            assert reply == expected
            assert page.locator("#chat .error").count() == 0
            assert page.input_value("#input") == ""
            # a second turn sends the whole conversation (2 user messages) and streams another reply
            page.fill("#input", "Speak again")
            page.keyboard.press("Enter")
            page.wait_for_function("document.querySelector('#chat').dataset.state === 'idle' && "
                                   "document.querySelectorAll('#chat .assistant').length === 2", timeout=30_000)
            assert page.locator("#chat .error").count() == 0
            page.click("#reset")
            assert page.locator("#chat .msg").count() == 0
        finally:
            browser.close()
