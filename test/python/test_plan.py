"""trellis.plan: the planner's search from Python, and the best plan it
finds compiled from its compile_options training as one rank does."""

import numpy as np
import pytest

import trellis
from conftest import batches


def test_the_best_plan_trains_as_one_rank(gpt2_tiny: str) -> None:
    found = trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=4, batch=8,
                         seq=16, precision="fp32", top=3)
    assert found["gpus"] == 4 and found["candidates_evaluated"] > 0
    plans = found["plans"]
    assert 1 <= len(plans) <= 3
    times = [plan["step_time_s"] for plan in plans]
    assert times == sorted(times)
    best = plans[0]
    mesh = best["mesh"]
    assert mesh["dp"] * mesh["tp"] * mesh["pp"] * mesh["cp"] == 4
    assert best["memory_from"] == "report" and best["fits"]
    plan = trellis.compile(gpt2_tiny, batch=8, seq=16, precision="fp32",
                           **best["compile_options"])
    assert plan.num_ranks == 4
    data = batches(256, 8, 16, 3)
    reference = trellis.launch(trellis.compile(gpt2_tiny, batch=8, seq=16),
                               batches=data)[0]
    losses = trellis.launch(plan, batches=data)[0]
    np.testing.assert_allclose(losses, reference, rtol=1e-5)


def test_a_fixed_plan_and_the_refusals(gpt2_tiny: str) -> None:
    fixed = trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=2, batch=8,
                         seq=16, evaluate="dp=1,tp=2,pp=1")
    # What it leaves free (ZeRO, micro-batches, SP, ...) is still searched.
    assert fixed["plans"]
    assert all(plan["mesh"]["tp"] == 2 and plan["mesh"]["dp"] == 1
               for plan in fixed["plans"])
    with pytest.raises(trellis.Error, match="cluster: 'nope' is neither a "
                       "cluster preset"):
        trellis.plan(gpt2_tiny, cluster="nope", gpus=2, batch=8, seq=16)
    with pytest.raises(trellis.Error, match="gpus: expected >= 1, found 0"):
        trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=0, batch=8, seq=16)
    # The counts are checked by the search itself, whoever calls it.
    for batch in (-8, 2**62):
        with pytest.raises(trellis.Error, match="the global batch: expected "
                           rf"\[1, 2\^31\] sequences, found {batch}"):
            trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=8, batch=batch,
                         seq=16)
    with pytest.raises(trellis.Error, match="the sequence length: expected "
                       r"\[2, 2\^24\] tokens, found 1"):
        trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=8, batch=8, seq=1)
    with pytest.raises(trellis.Error, match="the fixed dp x tp x pp x cp = 4, "
                       "but the plan is for 2 GPUs"):
        trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=2, batch=8, seq=16,
                     evaluate="dp=4")
    with pytest.raises(trellis.Error, match="evaluate: "):
        trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=2, batch=8, seq=16,
                     evaluate="dp=banana")


def train_and_read(session, data):
    """A rank's losses over `data` and the whole tensors after."""
    return [session.step(*batch) for batch in data], session.state_dict()


def test_an_hsdp_plan_trains_as_one_rank(gpt2_tiny: str) -> None:
    """A plan over named data axes (HSDP: ZeRO-3 within dp_shard, replicas
    over dp_replicate) comes back as keywords that compile it, and its
    losses and every parameter and optimizer state after three steps are
    one rank's (AdamW's epsilon at 1e-4, as in test_moe: at 1e-8 an
    embedding row of near-zero gradient turns the reduction order's last
    bits into a visible update)."""
    found = trellis.plan(gpt2_tiny, cluster="h100-sxm", gpus=4, batch=8,
                         seq=16, precision="fp32",
                         evaluate="dp_replicate=2,dp_shard=2,zero=3,"
                                  "zero-axes=dp_shard,micro-batch=2")
    best = found["plans"][0]
    assert best["plan"].startswith("pp=1,dp_replicate=2,dp_shard=2,tp=1,")
    keywords = best["compile_options"]
    assert keywords["mesh"] == "pp=1,dp_replicate=2,dp_shard=2,tp=1"
    assert keywords["zero_axes"] == "dp_shard"
    plan = trellis.compile(gpt2_tiny, batch=8, seq=16, precision="fp32",
                           adam_eps=1e-4, **keywords)
    assert plan.num_ranks == 4
    data = batches(256, 8, 16, 3)
    one = trellis.launch(trellis.compile(gpt2_tiny, batch=8, seq=16,
                                         adam_eps=1e-4),
                         fn=train_and_read, args=(data,))[0]
    hybrid = trellis.launch(plan, fn=train_and_read, args=(data,))[0]
    np.testing.assert_allclose(hybrid[0], one[0], rtol=1e-5)
    assert hybrid[1].keys() == one[1].keys()
    for name, value in one[1].items():
        np.testing.assert_allclose(hybrid[1][name], value, rtol=1e-5,
                                   atol=1e-6, err_msg=name)
