"""trellis.torch's mixture-of-experts blocks, recognized by what they
compute. A block holding fused experts (`experts.gate_up_proj` and
`experts.down_proj`, [E, 2F, H] and [E, H, F] or [E, H, 2F] and [E, F,
H]) is run once on random weights and random hidden states, its experts'
inputs (the chosen experts and their weights) and its output recorded,
and matched against the forms Trellis's moe_route and expert_matmul
compute: the router's logits x W^T (+ a bias), softmax or sigmoid
scores, the top-k of the scores (+ a correction bias for the choice
only), optionally within the best of contiguous groups ranked by their
two highest, the chosen scores (renormalized or not) times a constant;
the experts' gated MLP (gate and up in halves or alternating, each
expert's biases or none; act(gate) * up, or GPT-OSS's clamped SwiGLU,
checked on the experts alone at 1 and 8 times the hidden states' scale so
that clamps show) weighted and summed; then a shared expert added, gated
by a sigmoid, or averaged in. The form that reproduces every token is the block's; a block no form
reproduces is refused, naming what matched and what did not. Attribute
names (`top_k`, `norm_topk_prob`, `e_score_correction_bias`) decide
nothing: a router computes what its forward computes."""

import contextlib
import dataclasses
import inspect
import math
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from .. import Error

#: Tokens of the probe: enough that every expert is chosen and every group
#: limit shows.
_PROBE_TOKENS = 256
#: How close a form's output must be to the block's, relative to the
#: block's largest value (both in float32, summed in other orders), and
#: its weights to the block's, relative to each.
_TOLERANCE = 1e-4
_WEIGHT_TOLERANCE = 1e-5
#: Tokens whose k-th and next choice differ by less are ambiguous: float32
#: rounding may order them either way.
_TIE = 1e-5


@dataclasses.dataclass(frozen=True)
class RouterForm:
    """A router as moe_route computes it; tensors by their path in the
    block."""
    weight: str
    top_k: int
    sigmoid: bool
    logit_bias: Optional[str] = None
    choice_bias: Optional[str] = None
    normalize: bool = False
    scaling: float = 1.0
    groups: int = 0
    top_groups: int = 0
    group_top: int = 2

    def describe_choice(self) -> str:
        """The choice in words: `top-2 of sigmoid(x gate.weight^T) + bias`."""
        logits = f"x {self.weight}^T" + (
            f" + {self.logit_bias}" if self.logit_bias else "")
        scores = f"{'sigmoid' if self.sigmoid else 'softmax'}({logits})"
        choice = scores + (f" + {self.choice_bias}" if self.choice_bias
                           else "")
        text = f"top-{self.top_k} of {choice}"
        if self.groups:
            ranked = "highest" if self.group_top == 1 else "two highest"
            text += (f" within the {self.top_groups} best of {self.groups} "
                     f"groups (ranked by their {ranked})")
        return text

    def describe(self) -> str:
        """The router in words, its weights too."""
        text = self.describe_choice() + ", weighted by the chosen scores"
        if self.normalize:
            text += " renormalized"
        if self.scaling != 1.0:
            text += f" times {self.scaling:g}"
        return text


@dataclasses.dataclass(frozen=True)
class ExpertForm:
    """The experts' gated MLP: gate_up [E, 2F, H] read as x W^T
    (`transposed`) or [E, H, 2F] read as x W, its columns gate then up in
    halves or alternating (`interleaved`); each expert's biases (paths in
    the block) after the projections; the activation act_fn(gate) * up, or
    with `swiglu` = (alpha, limit) GPT-OSS's (clamp(up, -limit, limit) + 1)
    * g sigmoid(alpha g), g = min(gate, limit)."""
    transposed: bool = True
    interleaved: bool = False
    gate_up_bias: Optional[str] = None
    down_bias: Optional[str] = None
    swiglu: Optional[Tuple[float, float]] = None

    def describe(self) -> str:
        gate_up = "x W_gate_up" + ("^T" if self.transposed else "") + (
            f" + {self.gate_up_bias}" if self.gate_up_bias else "")
        split = "alternating" if self.interleaved else "halves"
        if self.swiglu:
            alpha, limit = self.swiglu
            act = (f"(clamp(up, -{limit:g}, {limit:g}) + 1) * g "
                   f"sigmoid({alpha:g} g), g = min(gate, {limit:g})")
        else:
            act = "act(gate) * up"
        down = "W_down" + ("^T" if self.transposed else "") + (
            f" + {self.down_bias}" if self.down_bias else "")
        return f"{act} of {gate_up} (gate and up in {split}), times {down}"

    def gated(self, projected: torch.Tensor, act: Any) -> torch.Tensor:
        """The activation's output from the gate_up projection [..., 2F]
        (biases added)."""
        size = projected.shape[-1] // 2
        if self.interleaved:
            pairs = projected.unflatten(-1, (size, 2))
            gate, up = pairs[..., 0], pairs[..., 1]
        else:
            gate, up = projected[..., :size], projected[..., size:]
        if self.swiglu is None:
            return act(gate) * up
        alpha, limit = self.swiglu
        gate = gate.clamp(max=limit)
        up = up.clamp(min=-limit, max=limit)
        return (up + 1) * (gate * torch.sigmoid(gate * alpha))


@dataclasses.dataclass(frozen=True)
class BlockForm:
    """A block: its router, its experts, and how a shared expert (a child
    module by its name) joins them: added, gated by the sigmoid of another
    child (`shared_gate`), or averaged with the experts' sum."""
    router: RouterForm
    experts: ExpertForm = ExpertForm()
    shared: Optional[str] = None
    #: The block returns (output, the chosen weights) (GPT-OSS), the
    #: weights [tokens, k] when `flat_weights`, else [..., k].
    returns_weights: bool = False
    flat_weights: bool = False
    shared_gate: Optional[str] = None
    average: bool = False


def choice_scores(logits: torch.Tensor, bias: Optional[torch.Tensor],
                  sigmoid: bool, groups: int, top_groups: int,
                  group_top: int = 2) -> Tuple[torch.Tensor, torch.Tensor]:
    """moe_route's scores [T, E] from logits [..., E], and what its choice
    ranks: score + bias, -inf outside the `top_groups` best of `groups`
    contiguous groups (a group ranked by the sum of its `group_top`
    highest)."""
    scores = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, -1)
    count = scores.shape[-1]
    flat = scores.reshape(-1, count)
    choice = flat if bias is None else flat + bias.reshape(-1).to(flat.dtype)
    if groups > 1:
        grouped = choice.view(-1, groups, count // groups)
        group_scores = grouped.topk(group_top, dim=-1)[0].sum(dim=-1)
        kept = torch.topk(group_scores, k=top_groups, dim=-1)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, kept, 1)
        mask = mask.unsqueeze(-1).expand(-1, groups, count // groups)
        choice = choice.masked_fill(~mask.reshape(-1, count).bool(),
                                    float("-inf"))
    return flat, choice


def route(logits: torch.Tensor, bias: Optional[torch.Tensor], top_k: int,
          sigmoid: bool, normalize: bool, scaling: float, groups: int,
          top_groups: int,
          group_top: int = 2) -> Tuple[torch.Tensor, torch.Tensor]:
    """moe_route's definition in logits' dtype: the top-k of the choice
    (choice_scores); the weights are the chosen scores, renormalized with
    `normalize`, times `scaling`. Returns (weights, experts [int64])."""
    flat, choice = choice_scores(logits, bias, sigmoid, groups, top_groups,
                                 group_top)
    chosen = torch.topk(choice, k=top_k, dim=-1)[1]
    weights = flat.gather(1, chosen)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    shape = (*logits.shape[:-1], top_k)
    return (weights * scaling).reshape(shape), chosen.reshape(shape)


def tensor_at(block: torch.nn.Module, path: str) -> torch.Tensor:
    """The parameter or buffer at `path` under `block`."""
    owner, _, name = path.rpartition(".")
    module = block.get_submodule(owner) if owner else block
    return getattr(module, name)


def _fused_experts(block: torch.nn.Module) -> Optional[torch.nn.Module]:
    experts = getattr(block, "experts", None)
    if not isinstance(experts, torch.nn.Module):
        return None
    gate_up = getattr(experts, "gate_up_proj", None)
    down = getattr(experts, "down_proj", None)
    if isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor):
        return experts
    return None


def sparse_blocks(module: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """The blocks of `module` holding fused experts, by their paths."""
    return [(name, child) for name, child in module.named_modules()
            if _fused_experts(child) is not None]


def _where(block: torch.nn.Module) -> str:
    """The file and line of the block's forward."""
    forward = type(block).forward
    try:
        file = inspect.getsourcefile(forward) or "?"
        line = inspect.getsourcelines(forward)[1]
    except (OSError, TypeError):
        return type(block).__name__
    return f"{type(block).__name__}.forward at {file}:{line}"


class _Refusal(Exception):
    pass


@contextlib.contextmanager
def _random_tensors(block: torch.nn.Module) -> Iterator[None]:
    """While inside, each floating parameter and buffer of `block` holds
    random float32 values at a trained model's scale (matrices 1/sqrt of
    their input width, vectors 0.1): zeros or ones at initialization
    would hide a bias or tie every router score. Restored after."""
    generator = torch.Generator().manual_seed(1234)
    saved, seen = [], set()
    with torch.no_grad():
        for tensor in [*block.parameters(), *block.buffers()]:
            if id(tensor) in seen or not tensor.is_floating_point():
                continue
            seen.add(id(tensor))
            saved.append((tensor, tensor.data))
            std = 1 / math.sqrt(tensor.shape[-1]) if tensor.dim() >= 2 else 0.1
            tensor.data = torch.randn(tuple(tensor.shape), generator=generator,
                                      dtype=torch.float32) * std
    try:
        yield
    finally:
        for tensor, data in saved:
            tensor.data = data


def _experts_inputs(block: torch.nn.Module, experts: torch.nn.Module,
                    hidden: torch.Tensor) -> Tuple[Any, Dict[str, Any]]:
    """The block's output on `hidden`, and what its experts were called
    with: {"chosen": [T, k] ids, "weights": [T, k]}."""
    called: Dict[str, Any] = {}

    def record(module: Any, args: Any, kwargs: Any) -> None:
        tensors = [a for a in (*args, *kwargs.values())
                   if isinstance(a, torch.Tensor)]
        ids = [t for t in tensors if not t.is_floating_point()]
        if len(ids) == 1:
            called["args"], called["kwargs"] = args, kwargs
            called["chosen"] = ids[0]
            called["weights"] = next(
                (t for t in tensors if t.is_floating_point() and
                 t.shape == ids[0].shape), None)

    handle = experts.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with torch.no_grad():
            output = block(hidden)
    finally:
        handle.remove()
    return output, called


def _numbers(block: torch.nn.Module) -> List[float]:
    """The numbers the block and its modules hold: the exact values a
    measured constant is snapped to."""
    found = []
    for module in block.modules():
        for value in vars(module).values():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found.append(float(value))
    return found


class _Probe:
    """The block run on random weights: what its router chose, the
    weights it gave, its output; and the tensors a form may read."""

    def __init__(self, block: torch.nn.Module, experts: torch.nn.Module):
        self.block, self.experts = block, experts
        gate_up, down = experts.gate_up_proj, experts.down_proj
        shapes = (tuple(gate_up.shape), tuple(down.shape))
        # Which layouts the shapes allow: [E, 2F, H] and [E, H, F] (x W^T),
        # [E, H, 2F] and [E, F, H] (x W).
        self.layouts = []
        if gate_up.dim() == 3 and down.dim() == 3:
            e, a, b = shapes[0]
            if a % 2 == 0 and shapes[1] == (e, b, a // 2):
                self.layouts.append(True)
            if b % 2 == 0 and shapes[1] == (e, b // 2, a):
                self.layouts.append(False)
        if not self.layouts:
            raise _Refusal(
                f"its experts' gate_up_proj {shapes[0]} and down_proj "
                f"{shapes[1]} are not a layout Trellis's expert ops read "
                "([E, 2F, H] and [E, H, F], or [E, H, 2F] and [E, F, H])")
        self.count = int(gate_up.shape[0])
        self.width = int(down.shape[1] if self.layouts[0] else down.shape[2])
        self.expert_vectors = {n: tuple(t.shape)
                               for n, t in experts.named_parameters()
                               if n not in ("gate_up_proj", "down_proj")}
        twice = 2 * int(down.shape[2] if self.layouts[0] else down.shape[1])
        others = sorted(n for n, shape in self.expert_vectors.items()
                        if shape not in ((self.count, twice),
                                         (self.count, self.width)))
        if others:
            raise _Refusal(
                f"its experts hold parameters Trellis's expert ops do not "
                f"compute with ({', '.join(others)})")
        outside = [(n, t) for n, t in [*block.named_parameters(),
                                       *block.named_buffers()]
                   if not n.startswith("experts.") and t.is_floating_point()]
        self.router_weights = [n for n, t in outside
                               if tuple(t.shape) == (self.count, self.width)]
        if not self.router_weights:
            raise _Refusal(f"no router weight [{self.count}, {self.width}] "
                           "outside its experts")
        self.vectors = [n for n, t in outside
                        if t.numel() == self.count and t.shape[-1] == self.count
                        and n not in self.router_weights]

    def run(self) -> None:
        generator = torch.Generator().manual_seed(4321)
        self.hidden = torch.randn(2, _PROBE_TOKENS // 2, self.width,
                                  generator=generator, dtype=torch.float32)
        output, called = _experts_inputs(self.block, self.experts, self.hidden)
        again, _ = _experts_inputs(self.block, self.experts, self.hidden)
        # (output, the chosen weights), as GPT-OSS's block returns.
        self.extra: Optional[torch.Tensor] = None
        if isinstance(output, tuple) and len(output) == 2 and \
                isinstance(output[1], torch.Tensor):
            output, self.extra = output
            again = again[0]
        if not isinstance(output, torch.Tensor) or \
                output.shape != self.hidden.shape:
            raise _Refusal("its forward does not return one tensor of its "
                           "input's shape, or that and its chosen weights")
        if not torch.equal(output, again):
            raise _Refusal("it computes another output on each call (random "
                           "router noise in training mode? put the module in "
                           "eval mode): random noise has no place in a plan")
        if "chosen" not in called or called["weights"] is None:
            raise _Refusal("its experts are not called with the chosen "
                           "experts [T, k] and their weights [T, k]")
        self.output = output.to(torch.float64)
        self.call = (called["args"], called["kwargs"])
        self.chosen = called["chosen"].reshape(_PROBE_TOKENS, -1).long()
        self.weights = called["weights"].reshape(_PROBE_TOKENS, -1).to(
            torch.float64)
        self.top_k = int(self.chosen.shape[-1])
        self.scale = float(self.output.abs().max()) or 1.0
        if self.extra is not None and not (
                self.extra.numel() == self.weights.numel() and torch.equal(
                    self.extra.reshape(_PROBE_TOKENS, -1).to(torch.float64),
                    self.weights)):
            raise _Refusal(
                f"its forward returns a second tensor "
                f"{tuple(self.extra.shape)} besides its output that is not "
                "the chosen experts' weights")

    def close(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        """a and b [.., H] agree on the clearly routed tokens."""
        difference = (a - b).reshape(_PROBE_TOKENS, -1)[self.clear]
        return bool(difference.abs().max() <= _TOLERANCE * self.scale)

    # -- the router ---------------------------------------------------

    def _tensor(self, path: str) -> torch.Tensor:
        return tensor_at(self.block, path).detach().to(torch.float64)

    def _logits(self, weight: str, bias: Optional[str]) -> torch.Tensor:
        """A form's logits, in float64 from the probe's float32 values."""
        x = self.hidden.reshape(_PROBE_TOKENS, self.width).to(torch.float64)
        logits = x @ self._tensor(weight).T
        if bias is not None:
            logits = logits + self._tensor(bias).reshape(-1)
        return logits

    def _route(self, form: RouterForm, normalize: bool = False
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`form`'s weights (scaling 1) and choice [T, k], and which tokens
        choose clearly: the k-th and the next expert further apart than
        float32 rounding could swap."""
        bias = self._tensor(form.choice_bias) if form.choice_bias else None
        logits = self._logits(form.weight, form.logit_bias)
        weights, chosen = route(logits, bias, self.top_k, form.sigmoid,
                                normalize, 1.0, form.groups, form.top_groups,
                                form.group_top)
        _, choice = choice_scores(logits, bias, form.sigmoid, form.groups,
                                  form.top_groups, form.group_top)
        clear = torch.ones(_PROBE_TOKENS, dtype=torch.bool)
        if self.top_k < self.count:
            top = choice.topk(self.top_k + 1, dim=-1).values
            gap = top[:, self.top_k - 1] - top[:, self.top_k]
            clear = ~(gap < _TIE)  # -inf - -inf is nan: not clear
        return weights, chosen, clear

    def _mismatched(self, chosen: torch.Tensor, clear: torch.Tensor) -> int:
        same = (chosen.sort(-1).values == self.chosen.sort(-1).values).all(-1)
        return int((~same & clear).sum())

    def _choices(self) -> Iterator[RouterForm]:
        """Every form of the choice, ungrouped ones first."""
        plain = [RouterForm(weight, self.top_k, sigmoid, logit_bias, choice)
                 for weight in self.router_weights
                 for logit_bias in [None, *self.vectors]
                 for sigmoid in (False, True)
                 for choice in [None, *self.vectors]
                 if choice is None or choice != logit_bias]
        yield from plain
        for group_top in (2, 1):
            for groups in range(2, self.count + 1):
                if self.count % groups or self.count // groups < group_top:
                    continue
                # A grouped router keeps each token's experts within its
                # top_groups groups: fewer than the recorded choices span
                # cannot be its form.
                size = self.count // groups
                spanned = torch.zeros(_PROBE_TOKENS, groups).scatter_(
                    1, self.chosen // size, 1).sum(-1)
                for top_groups in range(max(1, int(spanned.max())), groups):
                    if top_groups * (self.count // groups) < self.top_k:
                        continue
                    for form in plain:
                        yield dataclasses.replace(
                            form, groups=groups, top_groups=top_groups,
                            group_top=group_top)

    def router(self) -> RouterForm:
        best: Optional[Tuple[int, RouterForm]] = None
        for form in self._choices():
            _, chosen, clear = self._route(form)
            missed = self._mismatched(chosen, clear)
            if missed == 0:
                weighted = self._weights(form, clear)
                if weighted is not None:
                    return weighted
            if best is None or missed < best[0]:
                best = (missed, form)
        assert best is not None
        missed, form = best
        if missed == 0:
            raise _Refusal(
                f"its router chooses experts as {form.describe_choice()} "
                "does, but weights them otherwise than the chosen scores "
                "(renormalized or not) times a constant")
        raise _Refusal(
            f"its router chooses experts otherwise than every form Trellis's "
            f"moe_route computes (closest: {form.describe_choice()}, which "
            f"chooses otherwise for {missed} of {_PROBE_TOKENS} tokens); "
            "moe_route computes softmax or sigmoid scores of x W^T (+ a "
            "bias), the top-k of the scores (+ a correction bias for the "
            "choice), "
            "optionally within the best of contiguous groups ranked by their "
            "highest or two highest (DeepSeek-V2, V3), weighted by the "
            "chosen scores, "
            "renormalized or not, times a constant")

    def _weights(self, form: RouterForm,
                 clear: torch.Tensor) -> Optional[RouterForm]:
        """`form` with the renormalization and scaling that give the
        block's weights on the clearly chosen tokens, or None."""
        given = self.weights.gather(1, self.chosen.argsort(-1))[clear]
        for normalize in (False, True):
            weights, chosen, _ = self._route(form, normalize)
            computed = weights.gather(1, chosen.argsort(-1))[clear]
            if bool((computed <= 0).any()):
                continue
            ratio = given / computed
            middle = float(ratio.median())
            if middle <= 0 or float((ratio - middle).abs().max()) > \
                    _WEIGHT_TOLERANCE * abs(middle):
                continue
            return dataclasses.replace(form, normalize=normalize,
                                       scaling=self._snap(middle))
        return None

    def _snap(self, measured: float) -> float:
        """A measured constant as the exact number the block holds, or to
        seven digits."""
        if abs(measured - 1.0) <= _WEIGHT_TOLERANCE:
            return 1.0
        for value in _numbers(self.block):
            if value and abs(value - measured) <= \
                    _WEIGHT_TOLERANCE * abs(measured):
                return value
        return float(f"{measured:.7g}")

    # -- the experts and a shared expert ------------------------------

    def _experts_sum(self, form: ExpertForm, x: torch.Tensor,
                     chosen: torch.Tensor,
                     weights: torch.Tensor) -> torch.Tensor:
        """`form`'s weighted sum of the chosen experts' MLPs on x [T, H],
        in float64."""
        gate_up = self._tensor("experts.gate_up_proj")
        down = self._tensor("experts.down_proj")
        if form.transposed:
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
        gate_up_bias = self._tensor(form.gate_up_bias) \
            if form.gate_up_bias else None
        down_bias = self._tensor(form.down_bias) if form.down_bias else None
        act = getattr(self.experts, "act_fn", None)
        out = torch.zeros_like(x)
        with torch.no_grad():
            for expert in chosen.unique().tolist():
                rows, slots = (chosen == expert).nonzero(as_tuple=True)
                projected = x[rows] @ gate_up[expert]
                if gate_up_bias is not None:
                    projected = projected + gate_up_bias[expert]
                product = form.gated(projected, act) @ down[expert]
                if down_bias is not None:
                    product = product + down_bias[expert]
                out.index_add_(0, rows, product * weights[rows, slots, None])
        return out

    def _expert_forms(self) -> Iterator[ExpertForm]:
        """Every form the experts' tensors and numbers allow, the plain
        ones first."""
        down = tuple(self.experts.down_proj.shape)
        numbers = sorted({v for v in _numbers(self.experts) if v > 0})
        for transposed in self.layouts:
            twice = 2 * (down[2] if transposed else down[1])
            gate_up_biases = [None] + [
                f"experts.{n}" for n, s in self.expert_vectors.items()
                if s == (self.count, twice)]
            down_biases = [None] + [
                f"experts.{n}" for n, s in self.expert_vectors.items()
                if s == (self.count, self.width)]
            activations: List[Optional[Tuple[float, float]]] = []
            if callable(getattr(self.experts, "act_fn", None)):
                activations.append(None)
            activations += [(alpha, limit) for alpha in numbers
                            for limit in numbers]
            for interleaved in (False, True):
                for gate_up_bias in gate_up_biases:
                    for down_bias in down_biases:
                        for swiglu in activations:
                            yield ExpertForm(transposed, interleaved,
                                             gate_up_bias, down_bias, swiglu)

    def experts_form(self) -> ExpertForm:
        """The form the experts module computes, checked on it alone with
        the recorded choice, at 1 and 8 times the hidden states (clamps
        and saturations show)."""
        args, kwargs = self.call
        hidden = next(a for a in (*args, *kwargs.values())
                      if isinstance(a, torch.Tensor) and a.is_floating_point()
                      and a.shape[-1] == self.width)
        given = []
        for scale in (1.0, 8.0):
            def scaled(a: Any) -> Any:
                return a * scale if a is hidden else a
            with torch.no_grad():
                out = self.experts(*[scaled(a) for a in args],
                                   **{k: scaled(v) for k, v in kwargs.items()})
            given.append((scale, out.reshape(_PROBE_TOKENS, -1).to(
                torch.float64)))
        x = hidden.reshape(_PROBE_TOKENS, self.width).to(torch.float64)
        tried = 0
        for form in self._expert_forms():
            tried += 1
            if all(self._same(out, self._experts_sum(form, x * scale,
                                                     self.chosen,
                                                     self.weights))
                   for scale, out in given):
                return form
        raise _Refusal(
            f"its experts compute otherwise than each of the {tried} forms "
            "Trellis's expert ops build: act(gate) * up, or GPT-OSS's clamped "
            "SwiGLU with the experts' numbers, of x W_gate_up (gate and up in "
            "halves or alternating, each expert's biases or none), times "
            "W_down (+ each expert's bias)")

    @staticmethod
    def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
        scale = float(a.abs().max()) or 1.0
        return bool((a - b).abs().max() <= _TOLERANCE * scale)

    def routed(self, router: RouterForm, experts: ExpertForm) -> torch.Tensor:
        """The experts' weighted sum as expert_matmul computes it, in
        float64; sets the tokens the comparison reads (those chosen
        clearly)."""
        x = self.hidden.reshape(_PROBE_TOKENS, self.width).to(torch.float64)
        weights, chosen, self.clear = self._route(router, router.normalize)
        out = self._experts_sum(experts, x, chosen, weights * router.scaling)
        return out.reshape(self.hidden.shape)

    def _children(self, router: RouterForm) -> Dict[str, torch.Tensor]:
        """Each child module's output on the hidden states, but the
        experts' and the router's."""
        owner = router.weight.split(".")[0]
        outputs = {}
        for name, child in self.block.named_children():
            if child is self.experts or name == owner:
                continue
            try:
                with torch.no_grad():
                    value = child(self.hidden)
            except Exception:  # a child that takes no hidden states
                continue
            if isinstance(value, torch.Tensor) and value.shape[:-1] == \
                    self.hidden.shape[:-1]:
                outputs[name] = value.to(torch.float64)
        return outputs

    def block_form(self, router: RouterForm) -> BlockForm:
        form = self._block_form(router)
        if self.extra is None:
            return form
        return dataclasses.replace(form, returns_weights=True,
                                   flat_weights=self.extra.dim() == 2)

    def _block_form(self, router: RouterForm) -> BlockForm:
        experts = self.experts_form()
        routed = self.routed(router, experts)
        if self.close(self.output, routed):
            return BlockForm(router, experts)
        children = self._children(router)
        full = {n: v for n, v in children.items()
                if v.shape == self.hidden.shape}
        gates = {n: v for n, v in children.items() if v.shape[-1] == 1}
        for name, value in full.items():
            if self.close(self.output, routed + value):
                return BlockForm(router, experts, shared=name)
            if self.close(self.output, (routed + value) / 2):
                return BlockForm(router, experts, shared=name, average=True)
            for gate, gated in gates.items():
                if self.close(self.output, routed + torch.sigmoid(gated) *
                              value):
                    return BlockForm(router, experts, shared=name,
                                     shared_gate=gate)
        difference = float((self.output - routed).reshape(
            _PROBE_TOKENS, -1)[self.clear].abs().max())
        raise _Refusal(
            f"its router matches {router.describe()}, but its output is not "
            f"its experts' {experts.describe()} weighted and "
            "summed, alone or with a child module added (a shared expert), "
            "gated by a sigmoid, or averaged in (the experts' sum differs "
            f"by up to {difference:.3g} where the output reaches "
            f"{self.scale:.3g})")


def recognize(name: str, block: torch.nn.Module) -> BlockForm:
    """The form `block` computes, or an Error naming the block, where its
    forward is, and what matched and what did not."""
    experts = _fused_experts(block)
    assert experts is not None
    try:
        probe = _Probe(block, experts)
        with _random_tensors(block):
            probe.run()
            return probe.block_form(probe.router())
    except _Refusal as refusal:
        raise Error(f"the mixture-of-experts block {name} ({_where(block)}): "
                    f"{refusal}; Trellis trains no approximation of it") \
            from None
