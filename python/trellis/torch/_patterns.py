"""trellis.torch's patterns: subgraphs that become one graph op (attention
written out, rotate-half rope, RMSNorm's decomposition, flattened linear
layers and losses, fused q/k/v splits), tried before a node's operands are
converted."""

from __future__ import annotations

import math
import operator
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple,
                    Optional, Tuple)

import torch

from .. import Error
from ._aten import (_attention, _matmul_flags, _permute, _reshape, _scalar,
                    _slice, route_with_state)
from ._values import _causal_window, _Constant, _normalize_dim, _Tensor

if TYPE_CHECKING:  # annotations only: the converter imports this module
    from ._converter import _Converter

aten = torch.ops.aten


def _match_flat_cross_entropy(c: _Converter, node: Any) -> Optional[_Tensor]:
    """The loss of flattened rows is the loss of the rows in place: keeps
    the [batch, seq] layout that shards."""
    logits_node, targets_node = node.args[0], node.args[1]
    if len(node.args) > 2 or node.kwargs or not (
            _is_flatten(logits_node) and _is_flatten(targets_node)):
        return None
    logits = c.convert(logits_node.args[0])
    targets = c.convert(targets_node.args[0])
    if not isinstance(logits, _Tensor) or len(logits.shape) != \
            len(targets.shape) + 1:
        return None
    return _Tensor(c.op("cross_entropy", logits, targets))


class _FusedProjection(NamedTuple):
    """A projection of `source` whose output is split into `pieces` of
    `size` used apart (GPT-2's and nanoGPT's QKV): its weight, Conv1D's
    [K, N] or, `linear`, nn.Linear's [N, K], and its bias [N] or None."""
    source: Any
    weight: Any
    bias: Optional[Any]
    pieces: int
    size: int
    linear: bool

    @property
    def inputs(self) -> int:
        """K, the features the projection reads."""
        shape = self.weight.meta["val"].shape
        return int(shape[-1] if self.linear else shape[0])

    def weight_layout(self) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        """(held, the module's) shapes of the weight: each piece apart,
        [K, p, N / p] or [p, N / p, K], as the importer holds GPT-2's, so
        that a preset splits each piece by heads."""
        k, p, n = self.inputs, self.pieces, self.size
        if self.linear:
            return (p, n, k), (p * n, k)
        return (k, p, n), (k, p * n)


def _fused_split(c: _Converter, node: Any) -> Optional[_FusedProjection]:
    """split(view(addmm(b, view(x, [-1, K]), W), [..., N]), N / p, -1)
    (Conv1D) or split(linear(x, W [, b]), N / p, -1) (nn.Linear): a fused
    projection whose p outputs are used apart."""
    if _producer(node, aten.split.Tensor) is None or len(node.args) < 2:
        return None
    value, size = node.args[0], node.args[1]
    if not isinstance(size, int) or not isinstance(value, torch.fx.Node):
        return None
    shape = tuple(value.meta["val"].shape)
    dim = node.args[2] if len(node.args) > 2 else 0
    if _normalize_dim(dim, len(shape)) != len(shape) - 1 or \
            shape[-1] % size or shape[-1] // size < 2:
        return None
    linear = _producer(value, aten.linear.default)
    if linear is not None:
        source, weight = linear.args[0], linear.args[1]
        bias = linear.args[2] if len(linear.args) > 2 else None
        expected = (shape[-1], source.meta["val"].shape[-1])
    else:
        view = _producer(value, aten.view.default, aten.reshape.default)
        addmm = _producer(view.args[0], aten.addmm.default) if view else None
        if not addmm or len(addmm.args) > 3 or addmm.kwargs:
            return None
        inner = _producer(addmm.args[1], aten.view.default,
                          aten.reshape.default)
        if not inner:
            return None
        source, weight, bias = inner.args[0], addmm.args[2], addmm.args[0]
        expected = (source.meta["val"].shape[-1], shape[-1])
    parameters = c.signature.inputs_to_parameters
    if not all(isinstance(p, torch.fx.Node) and p.name in parameters and
               len(p.users) == 1 for p in (weight, bias) if p is not None):
        return None
    if tuple(source.meta["val"].shape)[:-1] != shape[:-1] or \
            tuple(weight.meta["val"].shape) != expected:
        return None
    return _FusedProjection(source, weight, bias, shape[-1] // size, size,
                            linear is not None)


def _match_fused_split(c: _Converter, node: Any) -> Optional[List[_Tensor]]:
    fused = _fused_split(c, node)
    if fused is None:
        return None
    x = c.materialize(c.convert(fused.source))
    weight = c.convert(fused.weight).value
    bias = c.convert(fused.bias).value if fused.bias is not None else None
    rows, size = fused.inputs, fused.size
    outputs = []
    for piece in range(fused.pieces):
        if fused.linear:
            w = c.emit("reshape", c.emit("slice", weight,
                                         offsets=[piece, 0, 0],
                                         sizes=[1, size, rows]),
                       shape=[size, rows])
            out = c.emit("matmul", x, w, transpose_rhs=True)
        else:
            w = c.emit("reshape", c.emit("slice", weight,
                                         offsets=[0, piece, 0],
                                         sizes=[rows, 1, size]),
                       shape=[rows, size])
            out = c.emit("matmul", x, w)
        if bias is not None:
            b = c.emit("reshape", c.emit("slice", bias, offsets=[piece, 0],
                                         sizes=[1, size]), shape=[size])
            out = c.emit("add", out, b)
        outputs.append(_Tensor(out))
    return outputs


def _match_flat_linear(c: _Converter, node: Any) -> Optional[_Tensor]:
    """view(addmm(b, view(x, [-1, K]), w), [..., N]): GPT-2's Conv1D, a
    matmul on x [..., K] in place (the batch dimensions stay, to shard)."""
    addmm = _producer(node.args[0], aten.addmm.default)
    if not addmm or len(addmm.args) > 3 or addmm.kwargs:
        return None
    inner = _producer(addmm.args[1], aten.view.default, aten.reshape.default)
    if not inner:
        return None
    source = inner.args[0]
    source_shape = tuple(source.meta["val"].shape)
    result_shape = tuple(node.meta["val"].shape)
    if source_shape[:-1] != result_shape[:-1] or len(source_shape) < 3:
        return None
    x = c.convert(source)
    weight = c.convert(addmm.args[2])
    bias = c.convert(addmm.args[0])
    if not all(isinstance(v, _Tensor) for v in (x, weight, bias)):
        return None
    right, transpose_rhs = _matmul_flags(c, weight)
    out = c.emit("matmul", c.materialize(x), right, transpose_rhs=transpose_rhs)
    return _Tensor(c.emit("add", out, c.materialize(bias)))


def _is_flatten(node: Any) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and
            node.target in (aten.flatten.using_ints, aten.view.default,
                            aten.reshape.default) and
            len(node.meta["val"].shape) <= 2 and
            isinstance(node.args[0], torch.fx.Node) and
            len(node.args[0].meta["val"].shape) >
            len(node.meta["val"].shape))


def _producer(node: Any, *targets: Any) -> Optional[Any]:
    """`node` when it is a call of one of `targets`."""
    if isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            node.target in targets:
        return node
    return None


_PASS_THROUGH = (aten.to.dtype, aten.to.dtype_layout, aten.to.device,
                 aten.dropout.default, aten.alias.default,
                 aten.contiguous.default, aten.clone.default,
                 aten.type_as.default)


def _through(node: Any) -> Any:
    """Skips casts to float32, eval-mode dropout and aliases."""
    while _producer(node, *_PASS_THROUGH):
        node = node.args[0]
    return node


def _unrepeated(node: Any) -> Any:
    """Hugging Face's repeat_kv (unsqueeze, expand, reshape) undone: the
    key/value heads graph.attention reads directly. torch.export writes
    the reshape of the expanded tensor as a contiguous clone and an
    _unsafe_view."""
    reshape = _producer(node, aten.reshape.default, aten.view.default,
                        aten._unsafe_view.default)
    if not reshape:
        return node
    copied = _producer(reshape.args[0], aten.clone.default)
    expand = _producer(copied.args[0] if copied else reshape.args[0],
                       aten.expand.default)
    if not expand:
        return node
    unsqueeze = _producer(expand.args[0], aten.unsqueeze.default)
    if not unsqueeze or unsqueeze.args[1] != 2:
        return node
    return unsqueeze.args[0]


def _soft_cap(c: _Converter, node: Any) -> Optional[Tuple[Any, float]]:
    """(x, c) when `node` is tanh(x / c) * c (Gemma 2's soft-capping)."""
    outer = _producer(node, aten.mul.Tensor)
    cap = outer and _scalar(c.arg(outer.args[1]))
    tanh = cap and _producer(outer.args[0], aten.tanh.default)
    inner = tanh and _producer(tanh.args[0], aten.div.Tensor)
    if not inner or _scalar(c.arg(inner.args[1])) != cap:
        return None
    return inner.args[0], abs(cap)  # c tanh(x / c) is even in c


def _sinks_dropped(c: _Converter, probabilities: Any
                   ) -> Optional[Tuple[Any, Any]]:
    """(softmax node, sinks node) when `probabilities` is GPT-OSS's
    attention sinks: softmax(cat([scores, expand(sinks)], -1) [- its
    row max]) with the sinks' last column sliced off."""
    sliced = _producer(probabilities, aten.slice.Tensor)
    if sliced is None or len(sliced.args) < 4:
        return None
    full = sliced.args[0].meta["val"].shape
    dim = _normalize_dim(sliced.args[1], len(full))
    end = sliced.args[3]
    if dim != len(full) - 1 or sliced.args[2] != 0 or \
            end not in (-1, int(full[-1]) - 1) or \
            (len(sliced.args) > 4 and sliced.args[4] != 1):
        return None
    softmax = _producer(_through(sliced.args[0]), aten.softmax.int,
                        aten._softmax.default)
    if softmax is None:
        return None
    combined = softmax.args[0]
    # Less its row maximum (softmax is the same without).
    shifted = _producer(combined, aten.sub.Tensor)
    if shifted is not None:
        maximum = _producer(shifted.args[1], aten.amax.default)
        if maximum is None:
            got = _producer(shifted.args[1], operator.getitem)
            maximum = got and _producer(got.args[0], aten.max.dim)
        if maximum is not None and maximum.args[0] is shifted.args[0]:
            combined = shifted.args[0]
    cat = _producer(combined, aten.cat.default)
    if cat is None or len(cat.args[0]) != 2 or _normalize_dim(
            cat.args[1] if len(cat.args) > 1 else 0, len(full)) != dim:
        return None
    scores, sinks = cat.args[0]
    return scores, sinks


def _head_vector(c: _Converter, node: Any, heads: int) -> Optional[_Tensor]:
    """The [heads] tensor that `node` expands (through reshapes and
    casts) to one value per head and row, or None."""
    node = _through(node)
    expand = _producer(node, aten.expand.default)
    if expand is not None:
        node = _through(expand.args[0])
    while _producer(node, aten.reshape.default, aten.view.default,
                    aten.unsqueeze.default):
        node = _through(node.args[0])
    value = c.convert(node)
    if not isinstance(value, _Tensor) or tuple(value.shape) != (heads,):
        return None
    return value


def _match_attention(c: _Converter, node: Any) -> Optional[_Tensor]:
    """matmul(softmax(softcap(matmul(q, k^T) * scale) [+ mask]), v), the
    soft-cap optional; with GPT-OSS's sinks, a logit per head joins the
    softmax and its column is dropped after."""
    probabilities = _through(node.args[0])
    dropped = _sinks_dropped(c, probabilities)
    sinks_node = None
    if dropped is not None:
        scores, sinks_node = dropped
    else:
        softmax = _producer(probabilities, aten.softmax.int,
                            aten._softmax.default)
        if not softmax:
            return None
        scores = softmax.args[0]
    mask = None
    add = _producer(scores, aten.add.Tensor)
    if add is not None:
        scores, mask = add.args
    softcap = None
    capped = _soft_cap(c, scores)
    if capped is not None:
        scores, softcap = capped
    scale = 1.0
    scaled = _producer(scores, aten.mul.Tensor, aten.div.Tensor)
    if scaled is not None and _scalar(c.arg(scaled.args[1])) is not None:
        factor = _scalar(c.arg(scaled.args[1]))
        scale = factor if scaled.target == aten.mul.Tensor else 1 / factor
        scores = scaled.args[0]
    product = _producer(scores, aten.matmul.default)
    if not product:
        return None
    query_node, key_t_node = product.args
    key_transpose = _producer(key_t_node, aten.transpose.int)
    if key_transpose is None:
        return None
    key_node = key_transpose.args[0]
    query = c.convert(query_node)
    key = c.convert(_unrepeated(key_node))
    value = c.convert(_unrepeated(node.args[1]))
    if any(not isinstance(v, _Tensor) or len(v.shape) != 4
           for v in (query, key, value)):
        return None
    sinks = None
    if sinks_node is not None:
        sinks = _head_vector(c, sinks_node, int(query.shape[1]))
        if sinks is None:
            raise Error("attention's softmax takes one more column (attention "
                        "sinks), but not a logit per head: graph.attention's "
                        "sinks are one learned logit per query head")
    causal, window = _mask_form(c, mask, query, key)
    return _attention(c, node, query, key, value, scale, causal, window,
                      softcap, sinks)


def _mask_form(c: _Converter, mask: Any, query: _Tensor,
               key: _Tensor) -> Tuple[bool, int]:
    """(causal, window) of the mask attention scores are added to (None:
    no mask), or an Error."""
    if mask is None:
        return False, 0
    mask_value = c.convert(mask) if isinstance(mask, torch.fx.Node) else mask
    window = (_causal_window(mask_value.tensor, query.shape[2], key.shape[2])
              if isinstance(mask_value, _Constant) else None)
    if window is None:
        raise Error("attention adds a mask that is neither causal nor a "
                    "causal sliding window: graph.attention masks causally "
                    "(perhaps with a sliding window) or not at all")
    return True, window


_RESHAPES = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


def _heads_merged(node: Any) -> Optional[Any]:
    """x [batch, heads, seq, dim] when `node` is x reshaped to [batch *
    heads, seq, dim], else None."""
    reshape = _producer(node, *_RESHAPES)
    if reshape is None:
        return None
    source = reshape.args[0]
    full = tuple(source.meta["val"].shape)
    merged = tuple(node.meta["val"].shape)
    if len(full) != 4 or merged != (full[0] * full[1], full[2], full[3]):
        return None
    return source


def _alibi_slopes(bias: Any, batch: int, heads: int) -> List[float]:
    """The slope per head of a constant bias [batch * heads, 1, keys] that
    is slope * (key position) plus a constant per head (ALiBi as BLOOM
    builds it), or an Error saying what it is not."""
    keys = int(bias.shape[-1])
    rows = bias.to(torch.float64).reshape(batch, heads, -1, keys)
    if rows.shape[2] != 1 or keys < 2:
        raise Error("attention scores plus a constant bias that differs "
                    "between queries: graph.attention builds ALiBi, a slope "
                    "per head times the key's distance")
    rows = rows[:, :, 0]
    slopes = (rows[..., -1] - rows[..., 0]) / (keys - 1)
    positions = torch.arange(keys, dtype=torch.float64)
    fitted = rows[..., :1] + slopes[..., None] * positions
    size = float(rows.abs().max()) or 1.0
    if float((fitted - rows).abs().max()) > 1e-5 * size or \
            float((slopes - slopes[:1]).abs().max()) > 1e-6 * size:
        raise Error("attention scores plus a constant bias per head and key "
                    "position that is not a slope per head times the key's "
                    "position (ALiBi): graph.attention builds ALiBi alone")
    return [float(s) for s in slopes[0]]


def _match_alibi_attention(c: _Converter, node: Any) -> Optional[_Tensor]:
    """BLOOM's attention with ALiBi, on heads merged into the batch:
    bmm(softmax(baddbmm(bias, q, k^T, beta, alpha) [+ mask]), v), the
    constant bias a slope per head times the key's position (+ a constant
    per head, which the softmax drops): graph.attention's `slopes`."""
    flat = _producer(_through(node.args[0]), *_RESHAPES)
    softmax = flat and _producer(_through(flat.args[0]), aten.softmax.int,
                                 aten._softmax.default)
    if not softmax:
        return None
    scores, mask = softmax.args[0], None
    add = _producer(scores, aten.add.Tensor)
    if add is not None:
        scores, mask = add.args
    unflat = _producer(_through(scores), *_RESHAPES)
    biased = unflat and _producer(_through(unflat.args[0]),
                                  aten.baddbmm.default)
    if not biased:
        return None
    bias_node, query_node, key_t_node = biased.args[:3]
    beta = float(biased.kwargs.get("beta", 1.0))
    alpha = float(biased.kwargs.get("alpha", 1.0))
    key_transpose = _producer(key_t_node, aten.transpose.int)
    key_node = key_transpose and _heads_merged(key_transpose.args[0])
    query_node = _heads_merged(query_node)
    value_node = _heads_merged(node.args[1])
    if key_node is None or query_node is None or value_node is None or \
            bias_node not in c.constants:
        return None
    query = c.convert(query_node)
    key = c.convert(_unrepeated(key_node))
    value = c.convert(_unrepeated(value_node))
    if any(not isinstance(v, _Tensor) for v in (query, key, value)):
        return None
    batch, heads = int(query.shape[0]), int(query.shape[1])
    slopes = [beta * s for s in _alibi_slopes(
        c.convert(bias_node).tensor, batch, heads)]
    causal, window = _mask_form(c, mask, query, key)
    table = _Tensor(c.emit("constant", shape=[heads], values=slopes))
    result = _attention(c, node, query, key, value, alpha, causal, window,
                        slopes=table)
    return _reshape(c, result, list(node.meta["val"].shape))


def _match_rope(c: _Converter, node: Any) -> Optional[_Tensor]:
    """x * cos + rotate(x) * sin: a rotary embedding on x [batch, heads,
    seq, dim] or [batch, seq, heads, dim] (GPT-J's), its cos and sin
    perhaps times an attention factor (YaRN's): a rope, then a scale.
    rotate(x) is Hugging Face's rotate-half, cat(-x[..., d/2:],
    x[..., :d/2]), pairing (i, i + d/2), or the rotate-every-two of GPT-J,
    CodeGen, GLM and Cohere, stack((-x[..., 1::2], x[..., 0::2]),
    -1).flatten(-2), pairing (2i, 2i + 1) (an interleaved rope)."""
    left = _producer(node.args[0], aten.mul.Tensor)
    right = _producer(node.args[1], aten.mul.Tensor)
    if not left or not right:
        return None
    x_node, cos_node = left.args
    rotated, sin_node = right.args
    layout = _rotate_half(x_node, rotated) or _rotate_every_two(x_node,
                                                                rotated)
    if layout is None:
        return None
    x = _rotated_operand(c, x_node, cos_node, sin_node)
    if x is None:
        return None
    return _rope(c, node, x, cos_node, sin_node, layout)


def _half_of(node: Any) -> Optional[Tuple[Any, int]]:
    """(x, i) when `node` is the i-th half of x along its last dimension
    (torch.chunk(x, 2, -1)[i], exported as a split)."""
    got = _producer(node, operator.getitem)
    split = got and _producer(got.args[0], aten.split.Tensor,
                              aten.chunk.default)
    if not split:
        return None
    x_node = split.args[0]
    shape = x_node.meta["val"].shape
    dim = _normalize_dim(split.args[2] if len(split.args) > 2 else 0,
                         len(shape))
    pieces = split.args[1] if split.target == aten.chunk.default else \
        shape[-1] // split.args[1] if isinstance(split.args[1], int) else 0
    if dim != len(shape) - 1 or pieces != 2 or shape[-1] % 2:
        return None
    return x_node, int(got.args[1])


def _product_of(node: Any, factor: Any) -> Optional[Any]:
    """The other factor of `node` = a * b when one of them is `factor`."""
    mul = _producer(node, aten.mul.Tensor)
    if not mul:
        return None
    if mul.args[1] is factor:
        return mul.args[0]
    return mul.args[0] is factor and mul.args[1]


def _match_split_rope(c: _Converter, node: Any) -> Optional[_Tensor]:
    """cat(x1 cos - x2 sin, x2 cos + x1 sin) of the halves x1, x2 of x
    (GPT-OSS's rotary embedding, its tables of half the head): a rope of
    the pairs (i, i + d/2), perhaps times an attention factor."""
    if len(node.args[0]) != 2:
        return None
    first = _producer(node.args[0][0], aten.sub.Tensor)
    second = _producer(node.args[0][1], aten.add.Tensor)
    if not first or not second:
        return None
    # first = x1 * cos - x2 * sin, with x1 the first half.
    cos_term, sin_term = first.args[0], first.args[1]
    cos_mul = _producer(cos_term, aten.mul.Tensor)
    if not cos_mul:
        return None
    for x1_node, cos_node in (tuple(cos_mul.args), tuple(cos_mul.args)[::-1]):
        half = _half_of(x1_node)
        if half is None or half[1] != 0:
            continue
        x_node = half[0]
        sin_mul = _producer(sin_term, aten.mul.Tensor)
        if not sin_mul:
            return None
        for x2_node, sin_node in (tuple(sin_mul.args),
                                  tuple(sin_mul.args)[::-1]):
            other = _half_of(x2_node)
            if other != (x_node, 1):
                continue
            # second = x2 * cos + x1 * sin, in either order.
            a, b = second.args[:2]
            if not any(_product_of(p, cos_node) is x2_node and
                       _product_of(q, sin_node) is x1_node
                       for p, q in ((a, b), (b, a))):
                return None
            x = _rotated_operand(c, x_node, cos_node, sin_node)
            if x is None:
                return None
            return _rope(c, node, x, cos_node, sin_node, "once")
    return None


def _rotate_half(x_node: Any, rotated: Any) -> Optional[str]:
    """"repeated" when `rotated` is cat(-x[..., d/2:], x[..., :d/2])."""
    cat = _producer(rotated, aten.cat.default)
    if not cat or len(cat.args[0]) != 2:
        return None
    negated = _producer(cat.args[0][0], aten.neg.default)
    low = _producer(cat.args[0][1], aten.slice.Tensor)
    high = _producer(negated.args[0], aten.slice.Tensor) if negated else None
    if not low or not high or low.args[0] is not x_node or \
            high.args[0] is not x_node:
        return None
    dim = x_node.meta["val"].shape[-1]
    if tuple(low.args[1:4]) not in ((3, 0, dim // 2), (-1, 0, dim // 2)) or \
            tuple(high.args[1:3]) not in ((3, dim // 2), (-1, dim // 2)):
        return None
    return "repeated"


def _every_other(node: Any, x_node: Any, start: int) -> bool:
    """node is x[..., start::2]."""
    piece = _producer(node, aten.slice.Tensor)
    return bool(piece) and _through(piece.args[0]) is _through(x_node) and \
        piece.args[1] in (3, -1) and len(piece.args) >= 5 and \
        piece.args[2] == start and piece.args[4] == 2


def _rotate_every_two(x_node: Any, rotated: Any) -> Optional[str]:
    """"interleaved" when `rotated` is stack((-x[..., 1::2],
    x[..., 0::2]), -1) flattened over its last two dimensions (casts to
    float32 around either, as Ernie 4.5 rotates in float32)."""
    flat = _producer(_through(rotated), aten.flatten.using_ints,
                     aten.view.default, aten.reshape.default,
                     aten._unsafe_view.default)
    if not flat or tuple(flat.meta["val"].shape) != \
            tuple(x_node.meta["val"].shape):
        return None
    stack = _producer(flat.args[0], aten.stack.default)
    if not stack or len(stack.args[0]) != 2 or \
            (stack.args[1] if len(stack.args) > 1 else 0) not in (4, -1):
        return None
    negated = _producer(stack.args[0][0], aten.neg.default)
    if not negated or not _every_other(negated.args[0], x_node, 1) or \
            not _every_other(stack.args[0][1], x_node, 0):
        return None
    return "interleaved"


def _rotated_operand(c: _Converter, x_node: Any, cos_node: Any,
                     sin_node: Any) -> Optional[_Tensor]:
    """x [batch, heads, seq, dim] when the tables are constants, else None
    (not a rotary embedding Trellis recognizes)."""
    if cos_node not in c.constants or sin_node not in c.constants:
        return None
    x = c.convert(x_node)
    if not isinstance(x, _Tensor) or len(x.shape) != 4:
        return None
    return x


def _sequence_axis(table: Any, shape: Tuple[int, ...]) -> int:
    """Where a rotary table [.., .., .., width] varies with the position:
    axis 2 for x [batch, heads, seq, dim] (Hugging Face's), axis 1 for x
    [batch, seq, heads, dim] (GPT-J's)."""
    if table.dim() == 4 and table.shape[2] == 1 and table.shape[1] > 1 and \
            table.shape[1] == shape[1]:
        return 1
    return 2


def _rope(c: _Converter, node: Any, x: _Tensor, cos_node: Any,
          sin_node: Any, layout: str) -> _Tensor:
    """graph.rope of x [batch, heads, seq, dim] or [batch, seq, heads, dim]
    with the frequencies of the constant cos and sin tables: cos(position
    * frequency) per pair, written twice (`layout` "repeated":
    rotate-half's cat(freqs, freqs)), once ("once"), or each twice in a
    row ("interleaved": repeat_interleave(freqs, 2), the pairs (2i,
    2i + 1)), perhaps times an attention factor (a scale after the
    rope)."""
    return _rope_of_tables(c, node, x, c.convert(cos_node).tensor,
                           c.convert(sin_node).tensor, layout,
                           _rotary_frequencies(c, cos_node, x.shape[3] // 2))


def _rope_of_tables(c: _Converter, node: Any, x: _Tensor, cos: Any, sin: Any,
                    layout: str, exact: Optional[Any]) -> _Tensor:
    """_rope from the tables' values; `exact`: the frequencies found above
    them, if any (checked against the tables)."""
    axis = _sequence_axis(cos, x.shape)
    seq, dim = x.shape[axis], x.shape[3]
    half = dim // 2
    width = half if layout == "once" else dim

    def table(values: Any) -> Any:
        """The table at the first batch row and head: [seq, width]."""
        if values.shape[-1] != width:
            raise Error(f"a rotary embedding ({layout} pairs) whose tables "
                        f"hold {values.shape[-1]} values per position, "
                        f"not {width}")
        full = values.expand(*x.shape[:3], width)
        return full[0, 0] if axis == 2 else full[0, :, 0]

    table_cos = table(cos).to(torch.float64)
    table_sin = table(sin).to(torch.float64)
    if seq < 2:
        raise Error("a rotary embedding over a sequence of 1: cannot tell its "
                    "frequencies")
    pairs = slice(0, dim, 2) if layout == "interleaved" else slice(0, half)
    measured = torch.atan2(table_sin[1, pairs], table_cos[1, pairs])
    measured = torch.where(measured < 0, measured + 2 * math.pi, measured)
    # The attention factor: cos at position 0 (cos 0 = 1 times it).
    factor = float(table_cos[0, 0])

    def matches(frequencies: Any) -> bool:
        """The tables are factor * cos/sin(position * frequency)."""
        angles = torch.arange(seq, dtype=torch.float64)[:, None] * frequencies
        if layout == "interleaved":
            expected_cos = angles.cos().repeat_interleave(2, dim=-1)
            expected_sin = angles.sin().repeat_interleave(2, dim=-1)
        else:
            copies = 2 if layout == "repeated" else 1
            expected_cos = torch.cat([angles.cos()] * copies, dim=-1)
            expected_sin = torch.cat([angles.sin()] * copies, dim=-1)
        return (factor > 0 and
                torch.allclose(table_cos, factor * expected_cos, atol=1e-5)
                and torch.allclose(table_sin, factor * expected_sin,
                                   atol=1e-5))

    # The exact frequencies the tables were computed from where they are
    # found above them, else those measured from the tables.
    frequencies = exact if exact is not None and matches(exact) else measured
    if not matches(frequencies):
        raise Error(f"a rotary embedding ({layout} pairs) whose cos/sin "
                    "tables are not a * cos/sin(position * frequency) "
                    "(position ids other than 0 .. n-1)")
    order = (0, 2, 1, 3) if axis == 2 else (0, 1, 2, 3)
    value = c.materialize(_permute(c, node, x, order))
    attributes: Dict[str, Any] = {
        "frequencies": [float(f) for f in frequencies]}
    if layout == "interleaved":
        attributes["interleaved"] = True
    out = c.emit("rope", value, **attributes)
    # The tables are rounded to the activations' dtype: a factor of 1
    # within that is none.
    if abs(factor - 1) > 1e-6:
        out = c.emit("scale", out, factor=factor)
    return _Tensor(out, order)


def _match_interleaved_rope(c: _Converter, node: Any) -> Optional[_Tensor]:
    """cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1) with x1 =
    x[..., 0::2], x2 = x[..., 1::2] and cos, sin the first halves of the
    rotary tables: DeepSeek's interleaved rotary embedding
    (apply_rotary_pos_emb_interleave), which is the rotate-half rope of x's
    pairs de-interleaved (x1, then x2)."""
    pieces = node.args[0]
    if len(pieces) != 2:
        return None
    difference = _producer(pieces[0], aten.sub.Tensor)
    total = _producer(pieces[1], aten.add.Tensor)
    if not difference or not total:
        return None
    products = [_producer(a, aten.mul.Tensor)
                for a in (*difference.args[:2], *total.args[:2])]
    if not all(products):
        return None
    (x1, cos_node), (x2, sin_node) = products[0].args, products[1].args
    if tuple(products[2].args) != (x2, cos_node) or \
            tuple(products[3].args) != (x1, sin_node):
        return None
    even = _producer(x1, aten.slice.Tensor)
    odd = _producer(x2, aten.slice.Tensor)
    if not even or not odd or even.args[0] is not odd.args[0]:
        return None
    x_node = even.args[0]
    rank = len(x_node.meta["val"].shape)
    last = (-1, rank - 1)
    concatenated_dim = node.args[1] if len(node.args) > 1 else 0
    if (concatenated_dim not in last or even.args[1] not in last or
            odd.args[1] not in last or len(even.args) < 5 or
            len(odd.args) < 5 or even.args[2] != 0 or odd.args[2] != 1 or
            even.args[4] != 2 or odd.args[4] != 2):
        return None
    x = _rotated_operand(c, x_node, cos_node, sin_node)
    if x is None:
        return None
    dim = x.shape[3]
    deinterleaved = _Tensor(c.op(
        "concat", _slice(c, node, x, 3, 0, dim, 2),
        _slice(c, node, x, 3, 1, dim, 2), dim=3))
    return _rope(c, node, deinterleaved, cos_node, sin_node, layout="once")


def _match_complex_rope(c: _Converter, node: Any) -> Optional[_Tensor]:
    """view_as_real(view_as_complex(x as pairs) * table).flatten(-2), the
    table constant complex numbers a * e^(i position frequency): DeepSeek-V2's
    rotary embedding, which turns the pairs (2i, 2i + 1) (an interleaved
    rope)."""
    real = _producer(node.args[0], aten.view_as_real.default)
    product = _producer(real.args[0], aten.mul.Tensor) if real else None
    if not product:
        return None
    pairs_node, table_node = product.args
    if not _producer(pairs_node, aten.view_as_complex.default):
        pairs_node, table_node = table_node, pairs_node
    complex_pairs = _producer(pairs_node, aten.view_as_complex.default)
    if not complex_pairs or not isinstance(table_node, torch.fx.Node) or \
            table_node not in c.constants:
        return None
    pairs = _producer(complex_pairs.args[0], aten.reshape.default,
                      aten.view.default)
    if not pairs:
        return None
    x_node = pairs.args[0]
    shape = tuple(x_node.meta["val"].shape)
    # The flatten (a view once functionalized) gives x's shape back.
    if len(shape) != 4 or shape[3] % 2 or \
            tuple(pairs.meta["val"].shape) != (*shape[:3], shape[3] // 2, 2) \
            or tuple(node.meta["val"].shape) != shape:
        return None
    x = c.convert(x_node)
    table = c.convert(table_node).tensor
    if not isinstance(x, _Tensor) or not isinstance(table, torch.Tensor) or \
            not table.is_complex():
        return None
    return _rope_of_tables(
        c, node, x, table.real.repeat_interleave(2, dim=-1),
        table.imag.repeat_interleave(2, dim=-1), "interleaved",
        _rotary_frequencies(c, table_node, shape[3] // 2))


def _rotary_frequencies(c: _Converter, node: Any,
                        pairs: int) -> Optional[Any]:
    """The nearest constant of `pairs` values above a rotary table (its
    inv_freq, or what a LongRoPE update picked), in float64, if any; the
    caller checks it against the table."""
    seen, queue = set(), [node]
    while queue:
        current = queue.pop(0)
        if current in seen or not isinstance(current, torch.fx.Node):
            continue
        seen.add(current)
        value = current.meta.get("val")
        if current is not node and current in c.constants and \
                isinstance(value, torch.Tensor) and \
                value.is_floating_point() and value.numel() == pairs:
            return c.convert(current).tensor.reshape(-1).to(torch.float64)
        queue.extend(current.all_input_nodes)
    return None


def _match_rms_norm(c: _Converter, node: Any) -> Optional[_Tensor]:
    """weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps))."""
    weight_node, normed = node.args
    if not (isinstance(weight_node, torch.fx.Node) and
            weight_node.name in c.signature.inputs_to_parameters):
        weight_node, normed = normed, weight_node
    if not (isinstance(weight_node, torch.fx.Node) and
            weight_node.name in c.signature.inputs_to_parameters):
        return None
    inner = _producer(_through(normed), aten.mul.Tensor)
    if not inner:
        return None
    x_node, rsqrt = inner.args
    rsqrt = _producer(rsqrt, aten.rsqrt.default)
    if not rsqrt:
        return None
    add = _producer(rsqrt.args[0], aten.add.Tensor)
    if not add or _scalar(add.args[1]) is None:
        return None
    mean = _producer(add.args[0], aten.mean.dim)
    if not mean or list(mean.args[1]) != [-1] or not mean.args[2]:
        return None
    square = _producer(mean.args[0], aten.pow.Tensor_Scalar)
    if not square or square.args[1] != 2 or \
            _through(square.args[0]) is not _through(x_node):
        return None
    x = c.convert(_through(x_node))
    weight = c.convert(weight_node)
    if not isinstance(x, _Tensor) or len(weight.shape) != 1:
        return None
    return _Tensor(c.op("rms_norm", x, weight, epsilon=float(add.args[1])))


def _match_route_state(c: _Converter, node: Any) -> Optional[Any]:
    """trellis::moe_route whose correction bias is a parameter or buffer
    of the module: a state, never converted as a trained parameter."""
    bias = node.args[1] if len(node.args) > 1 else None
    if not isinstance(bias, torch.fx.Node) or bias.op != "placeholder":
        return None
    target = (c.signature.inputs_to_buffers.get(bias.name) or
              c.signature.inputs_to_parameters.get(bias.name))
    if target is None:
        return None
    return route_with_state(c, node, target)


# Patterns tried, in order, before a node's operands are converted.
_PATTERNS: Dict[Any, Tuple[Callable[..., Any], ...]] = {
    aten.add.Tensor: (_match_rope,),
    aten.cat.default: (_match_interleaved_rope, _match_split_rope),
    aten.mul.Tensor: (_match_rms_norm,),
    aten.matmul.default: (_match_attention,),
    aten.bmm.default: (_match_alibi_attention,),
    aten.cross_entropy_loss.default: (_match_flat_cross_entropy,),
    aten.split.Tensor: (_match_fused_split,),
    aten.view.default: (_match_flat_linear, _match_complex_rope),
    aten.flatten.using_ints: (_match_complex_rope,),
    aten.reshape.default: (_match_flat_linear, _match_complex_rope),
    torch.ops.trellis.moe_route.default: (_match_route_state,),
}
