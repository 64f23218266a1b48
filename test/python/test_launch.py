"""trellis.launch: the ranks of dp, tp and pp plans as processes, equal to
the one-rank run; failing and dying ranks named."""

import os
import signal

import numpy as np
import pytest

import trellis
from conftest import batches

MESHES = [("dp=2", 1), ("tp=2", 1), ("pp=2", 2), ("dp=2,tp=2", 1)]


def test_meshes_equal_one_rank(gpt2_tiny: str) -> None:
    data = batches(256, 4, 16, 3)
    reference = trellis.launch(trellis.compile(gpt2_tiny, batch=4, seq=16),
                               batches=data)[0]
    for mesh, microbatches in MESHES:
        plan = trellis.compile(gpt2_tiny, batch=4, seq=16, mesh=mesh,
                               microbatches=microbatches)
        per_rank = trellis.launch(plan, batches=data)
        assert len(per_rank) == plan.num_ranks
        for losses in per_rank:  # every rank reports the loss
            np.testing.assert_allclose(losses, reference, rtol=1e-5,
                                       err_msg=mesh)


def rank_and_norm(session: trellis.Session, scale: float) -> tuple:
    """A rank's own function: its rank and a gathered tensor's norm."""
    table = session.read("transformer.wte.weight")
    with pytest.raises(trellis.Error, match="split over the ranks"):
        session.view("transformer.wte.weight")
    assert session.view("transformer.ln_f.bias").shape == (64,)
    return session.rank, float(np.linalg.norm(table)) * scale


def failing(session: trellis.Session) -> None:
    if session.rank == 1:
        raise ValueError("rank one refuses")
    session.read("transformer.wte.weight")


def outlived(session: trellis.Session) -> list:
    """Rank 1 leaves; rank 0's next step fails, and so does every call
    after it, saying why."""
    # A gather first: both ranks are past their sessions' connecting.
    session.read("transformer.wte.weight")
    if session.rank == 1:
        session.close()
        return []
    tokens = np.zeros((session.batch_size, session.seq_length), np.int32)
    messages = []
    for _ in range(2):
        try:
            session.step(tokens, tokens)
        except trellis.Error as error:
            messages.append(str(error))
    return messages


def dies(session: trellis.Session) -> None:
    """Rank 1 is killed (no result, no goodbye); rank 0's next step fails
    on the lost peer at once."""
    session.read("transformer.wte.weight")
    if session.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    tokens = np.zeros((session.batch_size, session.seq_length), np.int32)
    session.step(tokens, tokens)


def stage_view(session: trellis.Session) -> str:
    """The head's parameters live on the last pipeline stage only."""
    try:
        session.view("transformer.ln_f.bias")
        return "view"
    except trellis.Error as error:
        return str(error)


def test_views_where_memory_allows(gpt2_tiny: str) -> None:
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16, mesh="pp=2",
                           microbatches=2)
    first, last = trellis.launch(plan, fn=stage_view)
    assert first.startswith('tensor "transformer.ln_f.bias" has no view: ')
    assert first.endswith("this rank's pipeline stage does not hold it")
    assert last == "view"
    bf16 = trellis.compile(gpt2_tiny, batch=4, seq=16, precision="bf16")
    with trellis.Session(bf16) as session:
        held = "it is held in bf16, a view is fp32"
        with pytest.raises(trellis.Error, match=held):
            session.view("transformer.wte.weight")
        master = session.view("master.transformer.wte.weight")
        assert master.dtype == np.float32 and master.shape == (256, 64)


def test_functions_and_failures(gpt2_tiny: str) -> None:
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16, mesh="tp=2")
    results = trellis.launch(plan, fn=rank_and_norm, args=(2.0,))
    assert [rank for rank, _ in results] == [0, 1]
    assert results[0][1] == results[1][1]
    with pytest.raises(trellis.Error, match="rank 1: ValueError: rank one "
                       "refuses"):
        trellis.launch(plan, fn=failing, timeout=5)
    first, then = trellis.launch(plan, fn=outlived, timeout=5)[0]
    assert "step 1" in first
    assert then.startswith("this session failed (step 1")
    assert then.endswith("destroy it and create new sessions on every rank")
    # The killed rank is the cause, whichever of the two the launcher sees
    # end first.
    for _ in range(3):
        with pytest.raises(trellis.Error, match=r"^rank 1: was killed by "
                           r"signal 9 before returning a result \(then rank "
                           r"0 failed too\)$"):
            trellis.launch(plan, fn=dies, timeout=5)
    with pytest.raises(trellis.Error, match="expected nproc=2, found 4"):
        trellis.launch(plan, nproc=4, fn=failing)
    with pytest.raises(trellis.Error, match="expected fn .* or batches"):
        trellis.launch(plan)
    with pytest.raises(trellis.Error, match="cannot send the job"):
        trellis.launch(plan, fn=lambda session: None)
