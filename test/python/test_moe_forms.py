"""trellis.torch's mixture-of-experts blocks, recognized by what they
compute: routers of every supported form (softmax or sigmoid scores, a
correction bias on the block, the router or a module of its own, groups,
renormalized or not, a scaling) train as PyTorch trains them, losses,
one-step gradients and parameters, under dp, tp and ep as one rank; a
router or experts of another computation are refused naming the block,
never trained as something else."""

import types
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trellis  # noqa: E402
import trellis.torch as trellis_torch  # noqa: E402
from parity import TINY, convert, trained_scale  # noqa: E402
from parity import expect_trains_like_pytorch as parity  # noqa: E402

VOCAB = 128
COMMON = dict(TINY, attn_implementation="eager")


class BlockModel(torch.nn.Module):
    """A block of any model between an embedding and a head: the MoE block
    alone (its own model's attention may need what this test does not
    cover)."""

    def __init__(self, block: "torch.nn.Module", width: int = 32) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.block = block
        self.head = torch.nn.Linear(width, VOCAB, bias=False)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        hidden = self.embed(tokens)
        return self.head(hidden + self.block(hidden))


def transformers_model(kind: str) -> "torch.nn.Module":
    """Tiny transformers models whose MoE routers compute differently."""
    if kind == "minimax_m2":  # sigmoid + a correction bias on the block
        config: Any = transformers.MiniMaxM2Config(
            **COMMON, num_local_experts=8, num_experts_per_tok=2,
            rotary_dim=8)
    elif kind == "hunyuan_v1_moe":  # the router's weight in gate.wg
        config = transformers.HunYuanMoEV1Config(**COMMON, num_experts=8,
                                                 moe_topk=2)
    elif kind == "glm4_moe":  # sigmoid, bias, 2 of 4 groups, scaling
        config = transformers.Glm4MoeConfig(
            **COMMON, n_routed_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, first_k_dense_replace=0, n_group=4,
            topk_group=2, routed_scaling_factor=1.8, n_shared_experts=1)
    elif kind == "ernie4_5_moe":  # and its rotate-every-two in float32
        config = transformers.Ernie4_5_MoeConfig(
            **COMMON, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, moe_num_shared_experts=1)
    elif kind == "qwen2_moe":  # softmax, not renormalized, gated shared
        config = transformers.Qwen2MoeConfig(
            **COMMON, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, shared_expert_intermediate_size=40,
            norm_topk_prob=False)
    else:
        raise KeyError(kind)
    torch.manual_seed(0)
    module = transformers.AutoModelForCausalLM.from_config(config)
    return trained_scale(module, 8)


def expect_trains_like_pytorch(module: "torch.nn.Module", converted: Any,
                               what: str) -> None:
    parity(module, converted, what, VOCAB)


def block_model(kind: str) -> "torch.nn.Module":
    """A transformers MoE block between an embedding and a head."""
    if kind.startswith("cohere2_moe"):
        selection, shared = kind.split("-")[1:]
        config: Any = transformers.Cohere2MoeConfig(
            **COMMON, num_experts=8, num_experts_per_tok=2,
            expert_selection_fn=selection, norm_topk_prob=False,
            num_shared_experts=int(shared != "none"),
            shared_expert_combination_strategy=(
                shared if shared != "none" else "sum"))
        from transformers.models.cohere2_moe import modeling_cohere2_moe
        block: Any = modeling_cohere2_moe.Cohere2MoeSparseMoeBlock(config)
    elif kind == "ernie4_5_moe":  # softmax + a [1, E] bias parameter
        config = transformers.Ernie4_5_MoeConfig(
            **COMMON, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=24, moe_num_shared_experts=1)
        from transformers.models.ernie4_5_moe import modeling_ernie4_5_moe
        block = modeling_ernie4_5_moe.Ernie4_5_MoeSparseMoeBlock(config)
    elif kind.startswith("deepseek_v2") or kind == "cubed_group":
        # Softmax, not renormalized, x 1.5; perhaps within the best group.
        method = "group_limited_greedy" if kind.endswith("group") else \
            "greedy"
        config = transformers.DeepseekV2Config(
            **dict(COMMON, head_dim=None), n_routed_experts=8,
            num_experts_per_tok=2, moe_intermediate_size=24,
            routed_scaling_factor=1.5, topk_method=method, n_group=4,
            topk_group=1, n_shared_experts=1)
        from transformers.models.deepseek_v2 import modeling_deepseek_v2
        block = modeling_deepseek_v2.DeepseekV2Moe(config)
        if kind == "cubed_group":
            block.gate.__class__ = CubedGroupRouter
    elif kind == "phimoe":  # sparsemixer's weights
        config = transformers.PhimoeConfig(**COMMON, num_local_experts=4,
                                           num_experts_per_tok=2)
        from transformers.models.phimoe import modeling_phimoe
        block = modeling_phimoe.PhimoeSparseMoeBlock(config)
    elif kind == "gpt_oss_unheld_limit":
        # GPT-OSS's experts clamping at 0.3, a number they hold nowhere.
        config = transformers.GptOssConfig(**COMMON, num_local_experts=8,
                                           num_experts_per_tok=2)
        from transformers.models.gpt_oss import modeling_gpt_oss
        block = modeling_gpt_oss.GptOssMLP(config)

        def apply_gate(self: Any, gate_up: "torch.Tensor") -> "torch.Tensor":
            gate = gate_up[..., ::2].clamp(max=0.3)
            up = gate_up[..., 1::2].clamp(min=-0.3, max=0.3)
            return (up + 1) * gate * torch.sigmoid(gate * self.alpha)
        block.experts._apply_gate = types.MethodType(apply_gate,
                                                     block.experts)
    else:
        raise KeyError(kind)
    torch.manual_seed(0)
    return trained_scale(BlockModel(block), 8)


class CubedGroupRouter(torch.nn.Module):
    """DeepSeek-V2's router with its groups ranked by the sum of their
    scores' cubes: no form of moe_route."""

    def forward(self, hidden: "torch.Tensor") -> Any:
        scores = torch.softmax(hidden.reshape(-1, hidden.shape[-1]) @
                               self.weight.T, dim=-1)
        grouped = scores.view(-1, self.num_group,
                              self.num_experts // self.num_group)
        best = (grouped ** 3).sum(-1).topk(self.topk_group, dim=-1)[1]
        mask = torch.zeros_like(grouped[..., 0]).scatter_(1, best, 1)
        kept = scores * mask.repeat_interleave(grouped.shape[-1], dim=-1)
        weights, chosen = torch.topk(kept, k=self.top_k, dim=-1)
        return None, weights * self.routed_scaling_factor, chosen


@pytest.mark.parametrize("kind", ["minimax_m2", "hunyuan_v1_moe", "glm4_moe",
                                  "ernie4_5_moe", "qwen2_moe"])
def test_transformers_routers_train_as_pytorch(kind: str) -> None:
    """MiniMax-M2's sigmoid router with the correction bias on its block
    (trained as softmax top-k before, 1e-4 off after one step), HunYuan's
    router weight in gate.wg, GLM-4-MoE's grouped sigmoid router with its
    bias and scaling, Ernie 4.5's MoE model whole (its bias a [1, E]
    parameter of a module of its own), Qwen2-MoE without
    renormalization."""
    module = transformers_model(kind)
    converted = convert(module)
    assert "graph.moe_route" in converted.mlir()
    assert not any("forward" in vars(child) for child in module.modules())
    expect_trains_like_pytorch(module, converted, kind)


@pytest.mark.parametrize("kind", ["cohere2_moe-sigmoid-none",
                                  "cohere2_moe-softmax-average",
                                  "ernie4_5_moe", "deepseek_v2",
                                  "deepseek_v2_group"])
def test_router_blocks_train_as_pytorch(kind: str) -> None:
    """Cohere2-MoE's sigmoid router (the softmax's losses before: both
    were trained as softmax top-k) and its softmax over the chosen
    logits with the shared expert averaged in; Ernie 4.5's correction
    bias, a [1, E] parameter of a module of its own; DeepSeek-V2's
    softmax router times 1.5, not renormalized, and its group-limited
    greedy one (the best of 4 groups ranked by their highest score)."""
    module = block_model(kind)
    converted = convert(module)
    expect_trains_like_pytorch(module, converted, kind)


def test_the_correction_bias_is_a_state_of_its_name() -> None:
    """MiniMax-M2's bias, held by the block, is a state (loaded and saved,
    never trained) under the module's name; sigmoid scoring is in the
    router op."""
    module = transformers_model("minimax_m2")
    converted = convert(module)
    text = converted.mlir()
    assert 'scoring = "sigmoid"' in text
    name = "model.layers.0.mlp.e_score_correction_bias"
    np.testing.assert_array_equal(
        converted.weights[name],
        module.get_buffer(name).numpy())


@pytest.mark.parametrize("kind, why", [
    ("cubed_group", "its router chooses experts otherwise than every "
     "form Trellis's moe_route computes (closest: top-2 of softmax(x "
     "gate.weight^T)"),
    ("phimoe", "its router chooses experts as top-2 of softmax(x "
     "router.weight^T) does, but weights them otherwise than the chosen "
     "scores (renormalized or not) times a constant"),
    ("gpt_oss_unheld_limit", "its experts compute otherwise than each of "
     "the"),
])
def test_other_computations_are_refused_naming_the_block(kind: str,
                                                         why: str) -> None:
    """A router ranking its groups by the sum of their scores' cubes,
    PhiMoE's sparsemixer weights and GPT-OSS's experts clamping at a
    number they do not hold: refused, naming the block, where its forward
    is, and what did not match."""
    module = block_model(kind)
    with pytest.raises(trellis.Error) as refused:
        convert(module)
    message = str(refused.value)
    assert message.startswith("the mixture-of-experts block block (")
    assert ".forward at " in message and "modeling_" in message
    assert why in message
    assert message.endswith("Trellis trains no approximation of it")
    assert not any("forward" in vars(child) for child in module.modules())


class ScaledRouter(torch.nn.Module):
    """A router computing softmax top-k times `scaling`, or, with
    `squared`, the chosen scores squared: no form of moe_route."""

    def __init__(self, experts: int, width: int, scaling: float,
                 squared: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(experts, width))
        self.scaling, self.squared = scaling, squared
        self.routed_scaling_factor = 7.0  # an attribute no forward reads

    def forward(self, hidden: "torch.Tensor") -> Any:
        scores = torch.softmax(hidden @ self.weight.T, dim=-1)
        weights, chosen = torch.topk(scores, 2, dim=-1)
        if self.squared:
            weights = weights * weights
        return weights * self.scaling, chosen


class CustomBlock(torch.nn.Module):
    """A user's MoE block over transformers' fused experts."""

    def __init__(self, scaling: float, squared: bool) -> None:
        super().__init__()
        from transformers.models.qwen3_moe import modeling_qwen3_moe
        config = transformers.Qwen3MoeConfig(**COMMON, num_experts=4,
                                             moe_intermediate_size=24)
        self.gate = ScaledRouter(4, 32, scaling, squared)
        self.experts = modeling_qwen3_moe.Qwen3MoeExperts(config)

    def forward(self, hidden: "torch.Tensor") -> "torch.Tensor":
        flat = hidden.reshape(-1, hidden.shape[-1])
        weights, chosen = self.gate(flat)
        return self.experts(flat, chosen, weights).reshape(hidden.shape)


def test_a_router_is_what_it_computes_not_its_attributes() -> None:
    """An attribute named routed_scaling_factor (7) that no forward reads
    changes nothing; the scaling the router computes (0.75) is measured
    and trained; a router squaring its weights is refused."""
    torch.manual_seed(0)
    module = trained_scale(BlockModel(CustomBlock(0.75, False)), 4)
    converted = convert(module)
    assert "scaling = 7.5" in converted.mlir()
    expect_trains_like_pytorch(module, converted, "scaled router")
    squared = trained_scale(BlockModel(CustomBlock(1.0, True)), 4)
    with pytest.raises(trellis.Error, match="weights them otherwise"):
        convert(squared)


def test_a_random_router_is_refused() -> None:
    """Mixtral's router noise in training mode: another output each call,
    refused (random noise has no place in a plan)."""
    config = transformers.MixtralConfig(**COMMON, num_local_experts=4,
                                        num_experts_per_tok=2,
                                        router_jitter_noise=0.1)
    module = transformers.MixtralForCausalLM(config)
    module.train()
    with pytest.raises(trellis.Error,
                       match="computes another output on each call"):
        convert(module)
