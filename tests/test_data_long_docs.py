"""Long documents are split into BOS-prefixed pieces (02_data, `long_docs="split"`): resume is exact with many
continuation pieces in the buffer (their tie-break order must survive the state dict), and a batch of full-length
rows is spread over the long documents in the buffer instead of filling up with one book."""
import torch

from nanolit.core import sample_texts
from nanolit.data import DataLoader, write_shards
from nanolit.tokenizer import Tokenizer


def test_resume_with_many_continuations_and_rows_spread(tmp_path):
    docs = [t[i:i + 20000] for t in sample_texts().values() for i in range(0, len(t), 20000)]   # 17 long documents
    write_shards(docs, tmp_path / "data", "train", row_group_size=2)
    tok = Tokenizer.train_from_iterator(iter(docs), vocab_size=384)
    make = lambda B, T: DataLoader(tok, B, T, "train", data_dir=tmp_path / "data", buffer_size=8)
    for k in (1, 3, 7):
        a = make(8, 64)
        for _ in range(k): next(a)
        st = a.state_dict()
        assert sum(e[3] > 0 for e in st["buffer"]) >= 4          # several continuation pieces are buffered
        b = make(8, 64); b.load_state_dict(st)
        for _ in range(5):
            (x1, y1), (x2, y2) = next(a), next(b)
            assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_a_batch_is_spread_over_the_buffered_books(tmp_path):
    import re
    docs = [" ".join(f"d{i}x{j % 10}" for j in range(1500)) for i in range(8)]   # 8 long documents, each marked d<i>
    write_shards(docs, tmp_path / "data", "train", row_group_size=1)
    tok = Tokenizer.train_from_iterator(iter(docs), vocab_size=300)
    x, _ = next(DataLoader(tok, 16, 64, "train", data_dir=tmp_path / "data", buffer_size=8))
    owners = [set(re.findall(r"d(\d)x", tok.decode(r.tolist()))) for r in x]
    assert all(len(o) == 1 for o in owners)                        # each row: one piece of one book
    assert len(set.union(*owners)) == 8                            # all 8 books in one batch, not one or two
