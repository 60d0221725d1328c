import os
os.environ.setdefault("OMP_NUM_THREADS", "1")
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_base_dir(tmp_path_factory):
    """A NANOLIT_BASE_DIR holding a tiny real corpus (the shipped Shakespeare as parquet shards) and a 400-token
    tokenizer trained on it: what runs/cpu.sh makes, at a size that builds in about a second."""
    from nanolit.core import sample_texts
    from nanolit.data import write_shards
    from nanolit.tokenizer import Tokenizer
    base = tmp_path_factory.mktemp("nanolit_base")
    docs = [p for t in sample_texts().values() for p in t.split("\n\n\n") if p.strip()]
    write_shards(docs[:-20], base / "data", "train", row_group_size=8)
    write_shards(docs[-20:], base / "data", "val", row_group_size=4)
    Tokenizer.train_from_iterator(iter(docs), vocab_size=400).save(base / "tokenizer")
    return base
