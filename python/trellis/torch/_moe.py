"""trellis.torch's mixture-of-experts layers: transformers' sparse MoE
blocks (Mixtral, Qwen2-MoE, Qwen3-MoE) loop over the experts a batch hit,
a data-dependent loop torch.export cannot trace. While a module is
exported, each such block computes the same function through two custom
ops, trellis::moe_route (softmax router, top-k, renormalized where the
model does; trellis::moe_route_scored for DeepSeek-V3's sigmoid router
with its score correction bias, groups and scaling) and
trellis::expert_matmul (each slot's row times its
expert's matrix), which the converter translates into the graph ops of
the same names (docs/MoE.md)."""

import contextlib
import types
from typing import Any, Iterator, List, Tuple

import torch

_LIBRARY = torch.library.Library("trellis", "DEF")
_LIBRARY.define("moe_route(Tensor logits, int top_k, bool normalize) -> "
                "(Tensor, Tensor)")
_LIBRARY.define("expert_matmul(Tensor lhs, Tensor weight, Tensor experts, "
                "bool transpose_rhs) -> Tensor")
_LIBRARY.define("moe_route_scored(Tensor logits, Tensor bias, int top_k, "
                "bool normalize, float scaling, int groups, int top_groups) "
                "-> (Tensor, Tensor)")


@torch.library.impl(_LIBRARY, "moe_route", "CompositeExplicitAutograd")
def _moe_route(logits: torch.Tensor, top_k: int,
               normalize: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    scores = torch.softmax(logits.float(), dim=-1)
    weights, experts = torch.topk(scores, top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, experts.to(torch.int32)


@torch.library.register_fake("trellis::moe_route")
def _moe_route_fake(logits: torch.Tensor, top_k: int,
                    normalize: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    shape = (*logits.shape[:-1], top_k)
    return (logits.new_empty(shape, dtype=torch.float32),
            logits.new_empty(shape, dtype=torch.int32))


@torch.library.impl(_LIBRARY, "moe_route_scored", "CompositeExplicitAutograd")
def _moe_route_scored(logits: torch.Tensor, bias: torch.Tensor, top_k: int,
                      normalize: bool, scaling: float, groups: int,
                      top_groups: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3's router (transformers' DeepseekV3TopkRouter), as the
    graph's moe_route with scoring "sigmoid" computes it: sigmoid scores;
    the choice ranks score + bias among the experts of the token's
    top_groups groups (a group ranked by the sum of its two highest); the
    weights are the chosen scores, renormalized, times scaling."""
    scores = torch.sigmoid(logits.float())
    count = scores.shape[-1]
    flat = scores.reshape(-1, count)
    choice = flat + bias.float()
    if groups > 1:
        grouped = choice.view(-1, groups, count // groups)
        group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
        kept = torch.topk(group_scores, k=top_groups, dim=-1)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, kept, 1)
        mask = mask.unsqueeze(-1).expand(-1, groups, count // groups)
        choice = choice.masked_fill(~mask.reshape(-1, count).bool(),
                                    float("-inf"))
    chosen = torch.topk(choice, k=top_k, dim=-1)[1]
    weights = flat.gather(1, chosen)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    shape = (*logits.shape[:-1], top_k)
    return ((weights * scaling).reshape(shape),
            chosen.to(torch.int32).reshape(shape))


@torch.library.register_fake("trellis::moe_route_scored")
def _moe_route_scored_fake(logits: torch.Tensor, bias: torch.Tensor,
                           top_k: int, normalize: bool, scaling: float,
                           groups: int, top_groups: int
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
    return _moe_route_fake(logits, top_k, normalize)


def _expert_matrices(weight: torch.Tensor, experts: torch.Tensor,
                     transpose_rhs: bool) -> torch.Tensor:
    chosen = weight[experts.long()]  # [..., k, K, N] or [..., k, N, K]
    return chosen.transpose(-1, -2) if transpose_rhs else chosen


@torch.library.impl(_LIBRARY, "expert_matmul", "CompositeExplicitAutograd")
def _expert_matmul(lhs: torch.Tensor, weight: torch.Tensor,
                   experts: torch.Tensor, transpose_rhs: bool) -> torch.Tensor:
    if lhs.dim() == experts.dim():  # a row per token, for each of its slots
        lhs = lhs.unsqueeze(-2).expand(*experts.shape, lhs.shape[-1])
    matrices = _expert_matrices(weight, experts, transpose_rhs)
    return torch.matmul(lhs.unsqueeze(-2), matrices).squeeze(-2)


@torch.library.register_fake("trellis::expert_matmul")
def _expert_matmul_fake(lhs: torch.Tensor, weight: torch.Tensor,
                        experts: torch.Tensor,
                        transpose_rhs: bool) -> torch.Tensor:
    width = weight.shape[1] if transpose_rhs else weight.shape[2]
    return lhs.new_empty((*experts.shape, width))


def _sparse_forward(block: Any, hidden: torch.Tensor) -> torch.Tensor:
    """A transformers sparse MoE block's forward through the custom ops:
    the router's logits, each token's top-k, the experts' gated MLP, the
    slots weighted and summed, plus Qwen2-MoE's gated shared expert or
    DeepSeek-V3's ungated shared experts."""
    gate, experts = block.gate, block.experts
    normalize = bool(getattr(gate, "norm_topk_prob", True))
    if _is_deepseek_router(gate):
        logits = torch.nn.functional.linear(hidden.float(),
                                            gate.weight.float())
        weights, chosen = torch.ops.trellis.moe_route_scored(
            logits, gate.e_score_correction_bias, gate.top_k, normalize,
            float(gate.routed_scaling_factor), int(gate.num_group),
            int(gate.topk_group))
    else:
        logits = torch.nn.functional.linear(hidden, gate.weight)
        weights, chosen = torch.ops.trellis.moe_route(logits, gate.top_k,
                                                      normalize)
    size = experts.gate_up_proj.shape[1] // 2
    gate_proj = experts.gate_up_proj[:, :size]
    up_proj = experts.gate_up_proj[:, size:]
    gated = torch.ops.trellis.expert_matmul(hidden, gate_proj, chosen, True)
    up = torch.ops.trellis.expert_matmul(hidden, up_proj, chosen, True)
    down = torch.ops.trellis.expert_matmul(experts.act_fn(gated) * up,
                                           experts.down_proj, chosen, True)
    output = (down * weights.unsqueeze(-1)).sum(dim=-2)
    if hasattr(block, "shared_expert"):
        shared = block.shared_expert(hidden)
        output = output + torch.sigmoid(
            block.shared_expert_gate(hidden)) * shared
    if hasattr(block, "shared_experts"):
        # DeepSeek-V3's shared experts: added, without a gate.
        output = output + block.shared_experts(hidden)
    return output


def _sparse_blocks(module: torch.nn.Module) -> List[torch.nn.Module]:
    """transformers' sparse MoE blocks: a top-k router `gate` and fused
    `experts` (gate_up_proj [E, 2F, H], down_proj [E, H, F])."""
    found = []
    for child in module.modules():
        gate = getattr(child, "gate", None)
        experts = getattr(child, "experts", None)
        if (gate is not None and hasattr(gate, "top_k") and
                experts is not None and hasattr(experts, "gate_up_proj") and
                hasattr(experts, "down_proj")):
            found.append(child)
    return found


def _is_deepseek_router(gate: torch.nn.Module) -> bool:
    """DeepSeek-V3's router: sigmoid scores, a score correction bias (a
    buffer), grouped top-k, a routed scaling factor."""
    return all(hasattr(gate, name) for name in (
        "e_score_correction_bias", "num_group", "topk_group",
        "routed_scaling_factor"))


def _untranslated_router(block: torch.nn.Module) -> str:
    """Why `block` routes otherwise than moe_route computes (softmax top-k,
    Qwen2-MoE's gated shared expert; DeepSeek-V3's router and ungated
    shared experts), or "" when it does not."""
    gate = block.gate
    if _is_deepseek_router(gate):
        return ""
    if hasattr(gate, "e_score_correction_bias") or \
            getattr(gate, "num_group", 1) > 1 or \
            getattr(gate, "routed_scaling_factor", 1.0) != 1.0:
        return ("a router with a score correction bias, groups or a routed "
                "scaling factor but not DeepSeek-V3's (e_score_correction_bias, "
                "num_group, topk_group and routed_scaling_factor together)")
    return ""


@contextlib.contextmanager
def traceable_experts(module: torch.nn.Module) -> Iterator[int]:
    """While inside, every sparse MoE block of `module` computes through the
    custom ops (their count is yielded); their forwards are restored
    after."""
    blocks = _sparse_blocks(module)
    for block in blocks:
        # A router of another kind would be translated as softmax top-k:
        # refused, never approximated.
        why = _untranslated_router(block)
        if why:
            from .. import Error
            name = next((n for n, m in module.named_modules() if m is block),
                        type(block).__name__)
            raise Error(f"the mixture-of-experts block {name}: {why} is not "
                        "translated by trellis.torch (its moe_route computes "
                        "softmax top-k or DeepSeek-V3's router)")
        # Mixtral's router noise applies in training mode only.
        jitter = getattr(block, "jitter_noise", 0)
        if jitter and block.training:
            from .. import Error
            raise Error(f"a mixture-of-experts block in training mode with "
                        f"router jitter noise ({jitter}): random noise has no "
                        "place in a plan (put the module in eval mode)")
        block.forward = types.MethodType(_sparse_forward, block)
    try:
        yield len(blocks)
    finally:
        for block in blocks:
            del block.forward
