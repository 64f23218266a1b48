"""Shared fixtures of the Python tests (run by scripts/test.sh with the
build tree's package on PYTHONPATH)."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def examples() -> str:
    return os.path.join(ROOT, "examples")


@pytest.fixture
def gpt2_tiny(examples: str) -> str:
    return os.path.join(examples, "configs", "gpt2-tiny.json")


@pytest.fixture
def trellis_bin() -> str:
    """The build's trellis CLI ($TRELLIS_BIN; scripts/test.sh sets it)."""
    path = os.environ.get("TRELLIS_BIN",
                          os.path.join(ROOT, "build", "bin", "trellis"))
    if not os.path.exists(path):
        pytest.skip(f"no trellis binary at {path}: set TRELLIS_BIN")
    return path


def batches(vocab: int, batch: int, seq: int, steps: int, seed: int = 0):
    """`steps` (tokens, targets) pairs of next-token batches."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ids = rng.integers(0, vocab, (batch, seq + 1), dtype=np.int32)
        out.append((ids[:, :-1].copy(), ids[:, 1:].copy()))
    return out
