"""Issue 14.1: any string encodes (and trains) without the split regex overflowing, in bounded pieces.

tiktoken and rustbpe run the split pattern with fancy-regex, whose backtracking stack overflows on a run of about a
million spaces: a `pyo3_runtime.PanicException`, a BaseException nothing above catches. The Tokenizer cuts text into
pieces of at most MAX_PIECE characters where the pattern always cuts (`cut_pieces`), so the ids stay those of one
tiktoken call on ordinary text. These tests use megabyte inputs: about 10-20 s in all on a shared 2-core machine.
"""
import random
import sysconfig
from pathlib import Path

import pytest
import rustbpe
import tiktoken

from nanolit.core import sample_texts
from nanolit.tokenizer import (MAX_PIECE, SPECIAL_TOKENS, SPLIT_PATTERN, Tokenizer, compression, cut_pieces, scalar_text,
                               train_rustbpe)

MB = 1_000_000
SHAPES = {   # the worst inputs: long runs of one character class, no whitespace at all, megabyte lines
    "spaces": " ", "newlines": "\n", "tabs": "\t", "crlf": "\r\n", "mixed whitespace": " \t\n\r\x0b\xa0\u3000",
    "nbsp": "\xa0", "one letter": "a", "digits": "7", "punctuation": "!", "apostrophes": "'", "cjk": "中",
    "emoji": "😀", "combining marks": "\u0301", "no whitespace": "word,", "spaced digits": " 1",
    "punct newlines": "}\n", "indented braces": "\n }",
}


def sized(unit: str, n_bytes: int) -> str:
    "`unit` repeated to about `n_bytes` UTF-8 bytes, and to at least 1.1 million characters if it is whitespace."
    return unit * max(1, n_bytes // len(unit.encode()), 1_100_000 // len(unit) if unit.isspace() else 0)


@pytest.fixture(scope="module")
def tok():
    texts = list(sample_texts().values())
    runs = ["x" + " " * 40 + "y\n\n\n\t\t  1234 !!!! aaaa 中中中中"] * 50   # so runs of every class have merges
    return Tokenizer.train_from_iterator(texts + runs, 2048)


@pytest.mark.parametrize("name", list(SHAPES))
def test_worst_input_encodes_and_round_trips(tok, name):
    s = sized(SHAPES[name], MB)
    ids = tok.encode(s)                          # raised PanicException for spaces, tabs, nbsp, mixed whitespace
    assert tok.decode(ids) == s
    assert len(ids) <= len(s.encode())


def test_more_than_a_million_spaces_in_text(tok):
    s = "begin" + " " * 1_200_000 + "end\n" + "\t" * 1_100_000 + "x"
    assert tok.decode(tok.encode(s)) == s
    assert tok.decode(tok.encode([s, "short"])[0]) == s


def test_random_bytes_line(tok):
    s = random.Random(0).randbytes(MB).decode("utf-8", errors="replace")   # one "line" of mostly U+FFFD and controls
    assert tok.decode(tok.encode(s)) == s


def test_training_on_pathological_corpus():
    docs = ["hello world " * 20, " " * 1_200_000, "\t" * 1_100_000, "a" * MB] * 2
    tok = Tokenizer.train_from_iterator(iter(docs), 300)   # raised PanicException
    assert tok.vocab_size == 300
    assert tok.decode(tok.encode(docs[1])) == docs[1]


def test_training_on_surrogates():
    docs = ["hello world " * 20, "a\ud800b \ud83d\ude00 c"] * 3
    tok = Tokenizer.train_from_iterator(iter(docs), 300)   # raised UnicodeEncodeError
    assert tok.decode(tok.encode(docs[1])) == "a\ufffdb 😀 c"
    with pytest.raises(TypeError, match="document 1 is a bytes"): Tokenizer.train_from_iterator(["ok", b"x"], 300)


def test_training_ids_unchanged_on_long_ordinary_documents():
    "A document longer than MAX_PIECE trains into the same merges as rustbpe on the whole document in one piece."
    doc = "\n\n".join(sample_texts().values())
    assert len(doc) > 2 * MAX_PIECE and cut_pieces(doc)[1] == 0
    whole = rustbpe.Tokenizer(); whole.train_from_iterator(iter([doc]), 700, pattern=SPLIT_PATTERN)
    assert train_rustbpe([doc], 700) == {bytes(b): r for b, r in whole.get_mergeable_ranks()}


def _long_ordinary_texts():
    "Ordinary texts longer than MAX_PIECE: prose, Python source, minified JSON (no whitespace), CJK, a 1 MB line."
    prose = "\n\n".join(sample_texts().values())
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = "".join(p.read_text(errors="replace") for p in sorted(stdlib.glob("*.py"))[:60])[:MB]
    rng = random.Random(1)
    json_line = "[" + ",".join('{"id":%d,"name":"item%d","tags":["a%d","b"],"v":%0.3f}' % (i, i, i % 7, rng.random())
                               for i in range(15_000)) + "]"
    words = "東京 大阪 言語 模型 学習 データ テキスト 한국어 문장 Ελληνικά русский العربية हिन्दी".split()
    cjk = "".join(rng.choice(words) + rng.choice(["", "", "、", "。", "，", "\n"]) for _ in range(80_000))
    line = prose.replace("\n", " ")   # one line of 315 kB
    return {"prose": prose, "code": code, "json": json_line, "cjk": cjk, "line": line}


def test_ids_identical_to_one_tiktoken_call_on_ordinary_text(tok):
    texts = _long_ordinary_texts()
    for name, s in texts.items():
        pieces, forced = cut_pieces(s)
        assert len(s) > MAX_PIECE and len(pieces) > 1 and forced == 0, name
        assert tok.encode(s) == tok.enc.encode_ordinary(s), name     # one call: fine for tiktoken at this size
    for name, s in texts.items():   # short pieces: many more cuts, still where the pattern always cuts
        pieces, forced = cut_pieces(s[:200_000], 300)
        if forced == 0:
            assert [i for p in pieces for i in tok.enc.encode_ordinary(p)] == tok.enc.encode_ordinary(s[:200_000]), name


def test_ids_identical_on_adversarial_but_safe_strings(tok):
    "Strings tiktoken encodes in one call without failing: our ids are the same, long or short."
    rng = random.Random(2)
    units = [" ", "\n", "\t", " \n", "\n ", "a", "1", "!", "中", "😀", " a", "a ", "'s", "12 ", " !\n", "\r\n"]
    for _ in range(60):
        s = "".join(rng.choice(units) * rng.choice([1, 5, 300, 5000]) for _ in range(rng.randint(1, 60)))
        if cut_pieces(s)[1] == 0: assert tok.encode(s) == tok.enc.encode_ordinary(s)
    for n in [MAX_PIECE - 1, MAX_PIECE, MAX_PIECE + 1]:   # around the limit: one piece, or cut where the pattern cuts
        for s in [" " * (n - 1) + "x", "ab " * (n // 3) + "c" * (n % 3), "x" + "\n" * (n - 1)]:
            assert cut_pieces(s)[1] == 0, (n, s[:5])
            assert tok.encode(s) == tok.enc.encode_ordinary(s)


def test_cl100k_digit_rule_has_the_same_cut_places(tok):
    "cut_pieces applies the rules to cl100k's pattern too (digits in 1-3): the ids of the pieces equal one call."
    cl100k = SPLIT_PATTERN.replace(r"\p{N}{1,2}", r"\p{N}{1,3}")
    enc = tiktoken.Encoding("cl", pat_str=cl100k, mergeable_ranks=tok.mergeable_ranks, special_tokens={})
    rng = random.Random(4)
    units = [" ", "  ", "\n", "\t", "a", "1", "12", "123", "!", "'s", " 1", "\n 1", "中", "²"]
    checked = 0
    for _ in range(2000):
        s = "".join(rng.choice(units) for _ in range(rng.randint(1, 30)))
        pieces, forced = cut_pieces(s, rng.randint(2, 12), cl100k)
        if not forced:
            checked += 1
            assert [i for p in pieces for i in enc.encode_ordinary(p)] == enc.encode_ordinary(s), s
    assert checked > 300


def test_batch_threads_and_specials(tok):
    texts = [sized(" ", MB), "hello", "", sized("a b ", 300_000), "<|bos|>" * 50_000, sized("\t", 1_100_000)]
    one = [tok.encode(t) for t in texts]
    for n in [1, 4]: assert tok.encode(texts, num_threads=n) == one
    assert tok.encode(texts, prepend="<|bos|>", append=tok.bos_token_id) == [[tok.bos_token_id] + x + [tok.bos_token_id] for x in one]
    special_ids = set(range(tok.vocab_size - len(SPECIAL_TOKENS), tok.vocab_size))
    assert not set(one[4]) & special_ids                      # a special token's string in text is ordinary text
    assert tok.decode(one[4]) == texts[4]
    with pytest.raises(TypeError, match="item 1 is a int"): tok.encode(["ok", 1])


def test_no_base_exception_on_random_strings(tok):
    "Fuzz: strings of random code points, surrogates included, of random lengths; nothing but ids comes out."
    rng = random.Random(3)
    pools = [range(0x20, 0x7f), range(0x80, 0x800), range(0x800, 0xD800), range(0xD800, 0xE000), range(0xE000, 0x110000),
             [0x20, 0x09, 0x0a, 0x0d, 0xa0, 0x3000]]
    for _ in range(300):
        n = rng.choice([1, 10, 1000, 50_000, 300_000 if rng.random() < 0.05 else 100])
        s = "".join(chr(rng.choice(rng.choice(pools))) * rng.choice([1, 1, 50]) for _ in range(max(1, n // 20)))
        assert tok.decode(tok.encode(s)) == scalar_text(s)   # surrogates: as tiktoken resolves them (not UTF-8 text)


def test_compression_is_total(tok):
    docs = [" " * 1_200_000, "some words here"]
    assert compression(tok, docs) > 1
    foreign = tiktoken.Encoding("bytes", pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                                mergeable_ranks={bytes([i]): i for i in range(256)}, special_tokens={})   # GPT-2's pattern
    assert compression(foreign, docs) == 1.0


@pytest.mark.parametrize("s", ["Pi is " + "1234567890" * 14000, " " + "12" * 70000, "x" + "7" * 300001,
                               "5" * 262144 + " a", "(" + "9" * 140001 + ")"])
def test_digit_runs_longer_than_a_piece_cut_between_groups(tok, s):
    "A digit run longer than MAX_PIECE is cut between its digit groups, not forced mid-group: ids equal one tiktoken call."
    pieces, forced = cut_pieces(s)
    assert forced == 0 and len(pieces) > 1                                  # was one forced, misaligned cut
    assert tok.encode(s) == tok.enc.encode_ordinary(s)                      # was 126,899 vs 126,006 ids on the first
