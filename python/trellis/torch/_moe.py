"""trellis.torch's mixture-of-experts layers: transformers' sparse MoE
blocks loop over the experts a batch hit, a data-dependent loop
torch.export cannot trace. Each block is first recognized by what it
computes (_moe_forms.py); while the module is exported, it computes the
same function through two custom ops, trellis::moe_route (the router:
scores, the top-k choice, the chosen weights) and trellis::expert_matmul
(each slot's row times its expert's matrix), which the converter
translates into the graph ops of the same names (docs/MoE.md)."""

import contextlib
import types
from typing import Any, Iterator, Optional, Tuple

import torch

from ._moe_forms import BlockForm, recognize, route, sparse_blocks, tensor_at

_LIBRARY = torch.library.Library("trellis", "DEF")
_LIBRARY.define("moe_route(Tensor logits, Tensor? bias, int top_k, "
                "bool sigmoid, bool normalize, float scaling, int groups, "
                "int top_groups, int group_top) -> (Tensor, Tensor)")
_LIBRARY.define("expert_matmul(Tensor lhs, Tensor weight, Tensor experts, "
                "bool transpose_rhs) -> Tensor")


@torch.library.impl(_LIBRARY, "moe_route", "CompositeExplicitAutograd")
def _moe_route(logits: torch.Tensor, bias: Optional[torch.Tensor], top_k: int,
               sigmoid: bool, normalize: bool, scaling: float, groups: int,
               top_groups: int,
               group_top: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The graph's moe_route, in fp32 as its kernels compute it."""
    weights, chosen = route(logits.float(),
                            None if bias is None else bias.float(), top_k,
                            sigmoid, normalize, scaling, groups, top_groups,
                            group_top)
    return weights, chosen.to(torch.int32)


@torch.library.register_fake("trellis::moe_route")
def _moe_route_fake(logits: torch.Tensor, bias: Optional[torch.Tensor],
                    top_k: int, sigmoid: bool, normalize: bool,
                    scaling: float, groups: int, top_groups: int,
                    group_top: int) -> Tuple[torch.Tensor, torch.Tensor]:
    shape = (*logits.shape[:-1], top_k)
    return (logits.new_empty(shape, dtype=torch.float32),
            logits.new_empty(shape, dtype=torch.int32))


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


def _expert_bias(block: Any, path: str, hidden: torch.Tensor,
                 chosen: torch.Tensor) -> torch.Tensor:
    """Each slot's row of the bias [E, N] at `path` (its expert's), as
    expert_matmul of a row of ones and the bias read as [E, 1, N]: the
    bias's gradient and its split under expert parallelism are the
    weights'."""
    bias = tensor_at(block, path)
    ones = hidden.new_ones((*hidden.shape[:-1], 1))
    return torch.ops.trellis.expert_matmul(ones, bias.unsqueeze(1), chosen,
                                           False)


def _sparse_output(block: Any, form: BlockForm, hidden: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """`block`'s forward as `form` computes it, through the custom ops:
    the router's logits (in fp32 where its weight is fp32), each token's
    top-k, the experts' gated MLP, the slots weighted and summed, and the
    shared expert joined as the block joins it; and the chosen weights."""
    router, experts = form.router, block.experts
    weight = tensor_at(block, router.weight)
    lhs = hidden.float() if weight.dtype == torch.float32 else hidden
    logits = torch.nn.functional.linear(
        lhs, weight,
        tensor_at(block, router.logit_bias).reshape(-1)
        if router.logit_bias else None)
    bias = tensor_at(block, router.choice_bias) if router.choice_bias else None
    weights, chosen = torch.ops.trellis.moe_route(
        logits, bias, router.top_k, router.sigmoid, router.normalize,
        float(router.scaling), router.groups, router.top_groups,
        router.group_top)
    expert_form = form.experts
    projected = torch.ops.trellis.expert_matmul(
        hidden, experts.gate_up_proj, chosen, expert_form.transposed)
    if expert_form.gate_up_bias:
        projected = projected + _expert_bias(
            block, expert_form.gate_up_bias, hidden, chosen)
    down = torch.ops.trellis.expert_matmul(
        expert_form.gated(projected, getattr(experts, "act_fn", None)),
        experts.down_proj, chosen, expert_form.transposed)
    if expert_form.down_bias:
        down = down + _expert_bias(block, expert_form.down_bias, hidden,
                                   chosen)
    output = (down * weights.unsqueeze(-1)).sum(dim=-2)
    if form.shared is None:
        return output, weights
    shared = getattr(block, form.shared)(hidden)
    if form.shared_gate is not None:
        return output + torch.sigmoid(
            getattr(block, form.shared_gate)(hidden)) * shared, weights
    if form.average:
        return (output + shared) / 2, weights
    return output + shared, weights


def _sparse_forward(block: Any, form: BlockForm, hidden: torch.Tensor) -> Any:
    """`block`'s forward as `form` computes it (_sparse_output), and its
    chosen weights too where the block returns them."""
    output, weights = _sparse_output(block, form, hidden)
    if not form.returns_weights:
        return output
    return output, (weights.reshape(-1, weights.shape[-1])
                    if form.flat_weights else weights)


@contextlib.contextmanager
def traceable_experts(module: torch.nn.Module) -> Iterator[int]:
    """While inside, every sparse MoE block of `module` computes through the
    custom ops, as its recognized form (their count is yielded); their
    forwards are restored after. A block no form reproduces is an Error."""
    blocks = [(block, recognize(name, block))
              for name, block in sparse_blocks(module)]
    for block, form in blocks:
        block.forward = types.MethodType(
            lambda self, hidden, form=form: _sparse_forward(self, form,
                                                            hidden), block)
    try:
        yield len(blocks)
    finally:
        for block, _ in blocks:
            del block.forward
