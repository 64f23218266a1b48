"""trellis.torch's ATen table: one handler per ATen op (and Python call)
the converter translates, each writing graph ops for one node."""

from __future__ import annotations

import math
import operator
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Optional,
                    Sequence, Tuple)

import numpy as np
import torch

from .. import Attr, Error
from . import _moe  # noqa: F401 (defines torch.ops.trellis)
from ._values import _causal_window, _Constant, _normalize_dim, _Tensor

if TYPE_CHECKING:  # annotations only: the converter imports this module
    from ._converter import _Converter

aten = torch.ops.aten


def _scalar(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, _Constant):
        tensor = value.tensor
        if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
            return float(tensor.reshape(-1)[0])
        if isinstance(tensor, (int, float)):
            return float(tensor)
    return None


def _reshape(c: _Converter, value: Any, shape: Sequence[int]) -> _Tensor:
    source = c.materialize(value)
    sizes = list(shape)
    total = int(np.prod(source.shape))
    if -1 in sizes:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = total // known if known else 0
    if tuple(sizes) == tuple(source.shape):
        return _Tensor(source)
    return _Tensor(c.emit("reshape", source, shape=sizes))


# -- handlers: (converter, node, *args) -> converted value -------------------

def _identity(c: _Converter, node: Any, value: Any, *rest: Any, **kw: Any) -> Any:
    return value


def _to(c: _Converter, node: Any, value: Any, *rest: Any, **kw: Any) -> Any:
    dtype = kw.get("dtype")
    for item in rest:
        if isinstance(item, torch.dtype):
            dtype = item
    if dtype is not None and dtype != torch.float32:
        raise Error(f"a cast to {dtype}: the converted model computes in "
                    "float32 (compile with precision= for mixed precision)")
    return value


def _dropout(c: _Converter, node: Any, value: Any, p: float = 0.5,
             train: Optional[bool] = None) -> Any:
    if train and p > 0:
        raise Error(f"dropout with p={p} in training mode: call module.eval() "
                    "before converting (Trellis steps are deterministic)")
    return value


def _native_dropout(c: _Converter, node: Any, value: Any, p: float,
                    train: Optional[bool]) -> Any:
    """dropout as a functionalized program has it: (output, mask)."""
    return [_dropout(c, node, value, p, train), None]


def _binary(kind: str) -> Callable[..., Any]:
    def handler(c: _Converter, node: Any, lhs: Any, rhs: Any,
                alpha: Any = None) -> Any:
        if alpha is not None and alpha != 1:
            raise Error(f"{kind} with alpha={alpha}")
        scalar_rhs = _scalar(rhs)
        scalar_lhs = _scalar(lhs)
        if kind == "mul" and scalar_rhs is not None and isinstance(lhs, _Tensor):
            return _Tensor(c.emit("scale", c.materialize(lhs),
                                      factor=scalar_rhs))
        if kind == "mul" and scalar_lhs is not None and isinstance(rhs, _Tensor):
            return _Tensor(c.emit("scale", c.materialize(rhs),
                                      factor=scalar_lhs))
        shape = tuple(node.meta["val"].shape)
        left = c.scalar_operand(lhs, shape)
        right = c.scalar_operand(rhs, shape)
        return _Tensor(c.op(kind, left, right))
    return handler


def _rsub(c: _Converter, node: Any, lhs: Any, rhs: Any, alpha: Any = None) -> Any:
    return _binary("sub")(c, node, rhs, lhs, alpha)


def _unary(kind: str) -> Callable[..., Any]:
    def handler(c: _Converter, node: Any, value: Any) -> Any:
        return _Tensor(c.op(kind, value))
    return handler


def _gelu(c: _Converter, node: Any, value: Any, approximate: str = "none") -> Any:
    return _Tensor(c.op("gelu_tanh" if approximate == "tanh" else "gelu", value))


def _pow(c: _Converter, node: Any, value: Any, exponent: Any) -> Any:
    if exponent == 2:
        x = c.materialize(value)
        return _Tensor(c.emit("mul", x, x))
    if exponent == 3:
        x = c.materialize(value)
        return _Tensor(c.emit("mul", c.emit("mul", x, x), x))
    if exponent == 0.5:
        return _Tensor(c.op("sqrt", value))
    if exponent == -0.5:
        return _Tensor(c.op("rsqrt", value))
    raise Error(f"pow with exponent {exponent}: expected 2, 3, 0.5 or -0.5")


def _reduce(kind: str) -> Callable[..., Any]:
    def handler(c: _Converter, node: Any, value: Any, dims: Any = None,
                keepdim: bool = False, dtype: Any = None) -> Any:
        rank = len(value.shape)
        if dims is None:
            dims = list(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        dims = sorted(_normalize_dim(d, rank) for d in dims)
        return _Tensor(c.op(kind, value, dims=dims, keep_dims=bool(keepdim)))
    return handler


def _max_dim(c: _Converter, node: Any, value: Any, dim: int,
             keepdim: bool = False) -> Any:
    """torch.max along a dimension: its values (graph.reduce_max); its
    indices only where nothing reads them."""
    for user in node.users:
        if user.target is operator.getitem and user.args[1] == 1 and \
                user.users:
            raise Error("torch.max's indices along a dimension (an argmax) "
                        "are read: graph ops compute no indices")
    return (_reduce("reduce_max")(c, node, value, dim, keepdim), None)


def _softmax(c: _Converter, node: Any, value: Any, dim: int,
             half_to_float: Any = None) -> Any:
    if _normalize_dim(dim, len(value.shape)) != len(value.shape) - 1:
        raise Error(f"softmax over dimension {dim}: expected the last")
    return _Tensor(c.op("softmax", value))


def _view(c: _Converter, node: Any, value: Any, shape: Sequence[int]) -> Any:
    return _reshape(c, value, shape)


def _flatten(c: _Converter, node: Any, value: Any, start: int = 0,
             end: int = -1) -> Any:
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _unsqueeze(c: _Converter, node: Any, value: Any, dim: int) -> Any:
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _squeeze(c: _Converter, node: Any, value: Any, *dims: Any) -> Any:
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _transpose(c: _Converter, node: Any, value: Any, a: int, b: int) -> Any:
    rank = len(value.shape)
    a, b = _normalize_dim(a, rank), _normalize_dim(b, rank)
    perm = list(value.perm)
    perm[a], perm[b] = perm[b], perm[a]
    return _Tensor(value.value, tuple(perm))


def _permute(c: _Converter, node: Any, value: Any, dims: Sequence[int]) -> Any:
    rank = len(value.shape)
    return _Tensor(value.value,
                   tuple(value.perm[_normalize_dim(d, rank)] for d in dims))


def _t(c: _Converter, node: Any, value: Any) -> Any:
    return _transpose(c, node, value, 0, 1)


def _expand(c: _Converter, node: Any, value: Any, sizes: Sequence[int],
            implicit: bool = False) -> Any:
    shape = list(node.meta["val"].shape)
    if tuple(shape) == tuple(value.shape):
        return value
    return _Tensor(c.op("broadcast_to", value, shape=shape))


def _view_as(c: _Converter, node: Any, value: Any, other: Any) -> Any:
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _repeat(c: _Converter, node: Any, value: Any,
            repeats: Sequence[int]) -> Any:
    """repeat: each dimension d of size n tiled r times, as a new
    dimension of r before it broadcast and merged: [.., r, n, ..] ->
    [.., r * n, ..]."""
    source = list(value.shape)
    repeats = list(repeats)
    # Leading repeats beyond the value's rank add dimensions of 1 first.
    source = [1] * (len(repeats) - len(source)) + source
    value = _reshape(c, value, source)
    tiled = [size for r, n in zip(repeats, source) for size in (1, n)]
    expanded = [size for r, n in zip(repeats, source) for size in (r, n)]
    value = _reshape(c, value, tiled)
    if expanded != tiled:
        value = _Tensor(c.op("broadcast_to", value, shape=expanded))
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _rms_norm(c: _Converter, node: Any, value: Any,
              normalized_shape: Sequence[int], weight: Any = None,
              eps: Optional[float] = None) -> Any:
    """torch's rms_norm over the last dimension, with a weight: graph's
    rms_norm (its epsilon torch's default, the dtype's eps, when None)."""
    if len(normalized_shape) != 1 or weight is None:
        raise Error("rms_norm over more than the last dimension, or without "
                    "a weight: graph.rms_norm normalizes the last dimension "
                    "and scales it by a weight")
    if eps is None:
        eps = float(torch.finfo(node.args[0].meta["val"].dtype).eps)
    return _Tensor(c.op("rms_norm", value, weight, epsilon=float(eps)))


def _strided_slice(c: _Converter, node: Any, value: Any, dim: int,
                   begin: int, stop: int, stride: int) -> Any:
    """value[..., begin::stride, ...] taking one element of every group of
    `stride` along `dim` (interleaved pairs: DeepSeek's x[..., 0::2] and
    x[..., 1::2]): the dimension viewed as [groups, stride], one column
    kept."""
    shape = [int(d) for d in value.shape]
    size = shape[dim]
    count = len(range(begin, stop, stride))
    if size % stride != 0 or begin >= stride or count != size // stride:
        raise Error(f"a slice [{begin}:{stop}:{stride}] of a dimension of "
                    f"{size}: expected one element of every group of "
                    f"{stride} (the size a multiple of the step)")
    grouped = shape[:dim] + [count, stride] + shape[dim + 1:]
    picked = _slice(c, node, _reshape(c, value, tuple(grouped)), dim + 1,
                    begin, begin + 1)
    return _reshape(c, picked, tuple(shape[:dim] + [count] + shape[dim + 1:]))


def _slice(c: _Converter, node: Any, value: Any, dim: int = 0,
           start: Optional[int] = None, end: Optional[int] = None,
           step: int = 1) -> Any:
    shape = value.shape
    dim = _normalize_dim(dim, len(shape))
    begin, stop, stride = slice(start, end, step).indices(shape[dim])
    if stride > 1:
        return _strided_slice(c, node, value, dim, begin, stop, stride)
    if stride != 1:
        raise Error(f"a slice with step {step}: expected a positive step")
    if begin == 0 and stop == shape[dim]:
        return value
    offsets = [0] * len(shape)
    sizes = list(shape)
    offsets[dim], sizes[dim] = begin, stop - begin
    return _Tensor(c.op("slice", value, offsets=offsets, sizes=sizes))


def _split(c: _Converter, node: Any, value: Any, size: Any, dim: int = 0) -> Any:
    dim = _normalize_dim(dim, len(value.shape))
    total = value.shape[dim]
    sizes = ([size] * ((total + size - 1) // size) if isinstance(size, int)
             else list(size))
    pieces, begin = [], 0
    for length in sizes:
        length = min(length, total - begin)
        pieces.append(_slice(c, node, value, dim, begin, begin + length))
        begin += length
    return pieces


def _chunk(c: _Converter, node: Any, value: Any, chunks: int,
           dim: int = 0) -> Any:
    """torch.chunk: pieces of ceil(n / chunks), the last one smaller (and
    fewer pieces when they cover the dimension sooner)."""
    dim = _normalize_dim(dim, len(value.shape))
    total = value.shape[dim]
    return _split(c, node, value, max(1, -(-total // chunks)), dim)


def _select(c: _Converter, node: Any, value: Any, dim: int,
            index: int) -> Any:
    """value[..., index, ...]: a slice of one, its dimension dropped."""
    dim = _normalize_dim(dim, len(value.shape))
    if index < 0:
        index += value.shape[dim]
    piece = _slice(c, node, value, dim, index, index + 1)
    return _reshape(c, piece, tuple(node.meta["val"].shape))


def _unbind(c: _Converter, node: Any, value: Any, dim: int = 0) -> Any:
    """Every slice of one along `dim`, the dimension dropped."""
    dim = _normalize_dim(dim, len(value.shape))
    shapes = [tuple(piece.shape) for piece in node.meta["val"]]
    return [_reshape(c, _slice(c, node, value, dim, i, i + 1), shape)
            for i, shape in enumerate(shapes)]


def _unflatten(c: _Converter, node: Any, value: Any, dim: int,
               sizes: Sequence[int]) -> Any:
    return _reshape(c, value, tuple(node.meta["val"].shape))


def _numpy_t(c: _Converter, node: Any, value: Any) -> Any:
    """Tensor.T: every dimension reversed."""
    return _permute(c, node, value, list(reversed(range(len(value.shape)))))


def _index(c: _Converter, node: Any, value: Any,
           indices: Sequence[Any]) -> Any:
    """value[..., [i, i+1, ...], ...]: constant consecutive indices into one
    dimension (Falcon's `qkv[..., [-2], :]`), a slice that keeps it."""
    picked = [(d, index) for d, index in enumerate(indices)
              if index is not None]
    if len(picked) != 1 or not isinstance(picked[0][1], _Constant):
        raise Error("indexing with tensors: expected constant indices into "
                    "one dimension")
    dim, index = picked[0]
    size = value.shape[dim]
    wanted = [int(i) % size if -size <= int(i) < size else None
              for i in torch.as_tensor(index.tensor).reshape(-1)]
    if (not wanted or None in wanted or
            wanted != list(range(wanted[0], wanted[0] + len(wanted))) or
            torch.as_tensor(index.tensor).dim() != 1):
        raise Error(f"indexing dimension {dim} at "
                    f"{torch.as_tensor(index.tensor).tolist()}: expected "
                    "consecutive indices within its size")
    return _slice(c, node, value, dim, wanted[0], wanted[0] + len(wanted))


def _new_empty(c: _Converter, node: Any, value: Any, size: Sequence[int],
               **kw: Any) -> Any:
    """Tensor.new_empty: memory the program writes before it reads it
    (DeepSeek-V3's keys assembled by copies into slices, which
    functionalization turns into slice_scatter); zeros here."""
    _to(c, node, value, **kw)
    shape = [int(d) for d in node.meta["val"].shape]
    return _Tensor(c.emit("fill", shape=shape, value=0.0))


def _new_full(value: float) -> Callable[..., Any]:
    """Tensor.new_ones / new_zeros: a tensor of one value."""
    def handler(c: _Converter, node: Any, like: Any, size: Sequence[int],
                **kw: Any) -> Any:
        _to(c, node, like, **kw)
        shape = [int(d) for d in node.meta["val"].shape]
        return _Tensor(c.emit("fill", shape=shape, value=value))
    return handler


def _filled_like(value: Optional[float]) -> Callable[..., Any]:
    """zeros_like and ones_like (`value`), full_like (its fill value): a
    float tensor of the operand's shape holding one value."""
    def handler(c: _Converter, node: Any, like: Any, *rest: Any,
                **kw: Any) -> Any:
        result = node.meta["val"]
        if not result.dtype.is_floating_point:
            raise Error(f"{node.target.__name__.split('.')[0]} of "
                        f"{result.dtype}: graph constants are floating point")
        fill = value if value is not None else _scalar(rest[0])
        if fill is None:
            raise Error("full_like with a tensor fill value: expected a "
                        "number")
        return _Tensor(c.emit("fill", shape=[int(d) for d in result.shape],
                              value=float(fill)))
    return handler


def _clamp(c: _Converter, node: Any, value: Any, min: Any = None,
           max: Any = None) -> Any:
    """clamp(x, min, max) = min(max(x, lo), hi), the upper bound as
    -maximum(-y, -hi) (exact: negation is)."""
    shape = tuple(node.meta["val"].shape)
    x = c.materialize(value)
    if min is not None:
        x = c.emit("maximum", x, c.materialize(c.scalar_operand(min, shape)))
    if max is not None:
        if _scalar(max) is None:
            raise Error("clamp with a tensor bound: expected numbers")
        negated = c.emit("maximum", c.emit("neg", x), c.materialize(
            c.scalar_operand(-_scalar(max), shape)))
        x = c.emit("neg", negated)
    return _Tensor(x)


def _copy(c: _Converter, node: Any, target: Any, source: Any,
          non_blocking: bool = False) -> Any:
    """aten.copy (functionalized copy_): `source` broadcast to `target`'s
    shape."""
    return _expand(c, node, source, list(node.meta["val"].shape))


def _slice_scatter(c: _Converter, node: Any, value: Any, source: Any,
                   dim: int = 0, start: Optional[int] = None,
                   end: Optional[int] = None, step: int = 1) -> Any:
    """value with value[start:end] along `dim` replaced by `source`: the
    pieces before and after, concatenated around it."""
    shape = value.shape
    dim = _normalize_dim(dim, len(shape))
    begin, stop, stride = slice(start, end, step).indices(shape[dim])
    if stride != 1:
        raise Error(f"a slice_scatter with step {step}: expected step 1")
    pieces = []
    if begin > 0:
        pieces.append(_slice(c, node, value, dim, 0, begin))
    pieces.append(source)
    if stop < shape[dim]:
        pieces.append(_slice(c, node, value, dim, stop, shape[dim]))
    if len(pieces) == 1:
        return source
    return _Tensor(c.op("concat", *pieces, dim=dim))


def _getitem(c: _Converter, node: Any, values: Any, index: int) -> Any:
    return values[index]


def _cat(c: _Converter, node: Any, values: Sequence[Any], dim: int = 0) -> Any:
    rank = len(node.meta["val"].shape)
    kept = [v for v in values
            if not (isinstance(v, _Constant) and v.tensor.numel() == 0)]
    if len(kept) == 1:
        return kept[0]
    return _Tensor(c.op("concat", *kept, dim=_normalize_dim(dim, rank)))


def _stack(c: _Converter, node: Any, values: Sequence[Any],
           dim: int = 0) -> Any:
    """stack: each value given a dimension of 1 at `dim`, concatenated
    along it."""
    shape = list(node.meta["val"].shape)
    dim = _normalize_dim(dim, len(shape))
    shape[dim] = 1
    pieces = [_reshape(c, value, shape) for value in values]
    if len(pieces) == 1:
        return pieces[0]
    return _Tensor(c.op("concat", *pieces, dim=dim))


def _complex(c: _Converter, node: Any, value: Any) -> Any:
    """Complex numbers enter only as a rotary embedding (_patterns'
    _match_complex_rope): any other use is refused."""
    raise Error("complex numbers used otherwise than as a rotary embedding "
                "(view_as_real(view_as_complex(x as pairs) * a constant "
                "table).flatten(-2)): graph ops compute real numbers")


def _softplus(c: _Converter, node: Any, value: Any, beta: float = 1,
              threshold: float = 20) -> Any:
    """softplus: log(1 + e^(beta x)) / beta, x above threshold / beta;
    graph.softplus is beta 1, threshold 20 (torch's defaults), and other
    betas scale around it."""
    if threshold != 20:
        raise Error(f"softplus with threshold {threshold}: graph.softplus "
                    "switches to x above 20 (torch's default)")
    if beta == 1:
        return _Tensor(c.op("softplus", value))
    scaled = c.emit("scale", c.materialize(value), factor=float(beta))
    return _Tensor(c.emit("scale", c.emit("softplus", scaled),
                          factor=1.0 / float(beta)))


def _square(c: _Converter, node: Any, value: Any) -> Any:
    x = c.materialize(value)
    return _Tensor(c.emit("mul", x, x))


def _embedding(c: _Converter, node: Any, table: Any, ids: Any, *rest: Any) -> Any:
    # nn.Embedding(padding_idx=...): that row gets no gradient (aten's
    # padding_idx is -1 for none; a negative one counts from the end).
    padding = int(rest[0]) if rest else -1
    if padding < -1:
        padding += int(node.args[0].meta["val"].shape[0])
    if isinstance(ids, _Constant):
        # Positions: k, k + 1, ..., k + n - 1 in every row (OPT's learned
        # positions start at 2): rows k .. k + n - 1 of the table.
        positions = ids.tensor
        length = positions.shape[-1]
        rows = positions.reshape(-1, length)
        offset = int(rows[0, 0]) if rows.numel() else 0
        expected = torch.arange(length, dtype=positions.dtype) + offset
        table_rows = int(node.args[0].meta["val"].shape[0])
        if (not bool((rows == expected).all()) or offset < 0 or
                offset + length > table_rows):
            raise Error("an embedding read at constant ids that are not "
                        "positions k .. k+n-1 within the table")
        width = int(node.args[0].meta["val"].shape[1])
        if offset == 0:
            read = c.emit("embedding", c.materialize(table),
                          c.emit("positions", length=length))
        else:
            read = c.emit("slice", c.materialize(table),
                          offsets=[offset, 0], sizes=[length, width])
        # The same rows for every row of ids (a batch of positions).
        shape = tuple(node.meta["val"].shape)
        single = (1,) * (len(shape) - 2) + (length, width)
        placed = _reshape(c, _Tensor(read), single)
        if shape == single:
            return placed
        return _Tensor(c.emit("broadcast_to", placed.value, shape=list(shape)))
    if padding >= 0:
        return _Tensor(c.op("embedding", table, ids, padding_idx=padding))
    return _Tensor(c.op("embedding", table, ids))


def _matmul_flags(c: _Converter, value: _Tensor) -> Tuple[Any, bool]:
    """A matmul operand and whether it is transposed (its last two
    dimensions swapped, free)."""
    perm = value.perm
    rank = len(perm)
    if rank >= 2:
        swapped = list(range(rank))
        swapped[-1], swapped[-2] = swapped[-2], swapped[-1]
        if tuple(perm) == tuple(swapped):
            return value.value, True
    return c.materialize(value), False


def _matmul(c: _Converter, node: Any, lhs: Any, rhs: Any) -> Any:
    left, transpose_lhs = _matmul_flags(c, lhs)
    right, transpose_rhs = _matmul_flags(c, rhs)
    return _Tensor(c.emit("matmul", left, right,
                              transpose_lhs=transpose_lhs,
                              transpose_rhs=transpose_rhs))


def _linear(c: _Converter, node: Any, value: Any, weight: Any,
            bias: Any = None) -> Any:
    out = c.emit("matmul", c.materialize(value), c.materialize(weight),
                     transpose_rhs=True)
    if bias is not None:
        out = c.emit("add", out, c.materialize(bias))
    return _Tensor(out)


def _addmm(c: _Converter, node: Any, bias: Any, lhs: Any, rhs: Any,
           beta: Any = 1, alpha: Any = 1) -> Any:
    """addmm and baddbmm: beta bias + alpha lhs @ rhs."""
    left, transpose_lhs = _matmul_flags(c, lhs)
    right, transpose_rhs = _matmul_flags(c, rhs)
    out = c.emit("matmul", left, right, transpose_lhs=transpose_lhs,
                     transpose_rhs=transpose_rhs)
    if alpha != 1:
        out = c.emit("scale", out, factor=float(alpha))
    shape = tuple(node.meta["val"].shape)
    added = c.materialize(c.scalar_operand(bias, shape))
    if beta != 1:
        added = c.emit("scale", added, factor=float(beta))
    return _Tensor(c.emit("add", out, added))


def _layer_norm(c: _Converter, node: Any, value: Any, shape: Sequence[int],
                weight: Any = None, bias: Any = None, eps: float = 1e-5,
                cudnn: Any = None) -> Any:
    if len(shape) != 1:
        raise Error(f"layer_norm over {list(shape)}: expected the last "
                    "dimension only")
    # Without affine parameters (OLMo), or without a bias: a gain of ones,
    # a bias of zeros, constants rather than parameters.
    width = [int(shape[0])]
    if weight is None:
        weight = _Tensor(c.emit("fill", shape=width, value=1.0))
    if bias is None:
        bias = _Tensor(c.emit("fill", shape=width, value=0.0))
    return _Tensor(c.op("layer_norm", value, weight, bias, epsilon=float(eps)))


def _cross_entropy(c: _Converter, node: Any, logits: Any, targets: Any,
                   weight: Any = None, reduction: int = 1,
                   ignore_index: int = -100, label_smoothing: float = 0.0) -> Any:
    if weight is not None or reduction != 1 or label_smoothing:
        raise Error("cross_entropy with class weights, a reduction other "
                    "than the mean, or label smoothing")
    # Targets are token ids in [0, vocab): an ignore_index outside (-100,
    # nanoGPT's -1) never matches one; inside, it would drop those
    # positions from the mean, which the graph's loss does not.
    classes = int(node.args[0].meta["val"].shape[-1])
    if 0 <= ignore_index < classes:
        raise Error(f"cross_entropy ignoring target {ignore_index}, a token "
                    f"id of the vocabulary [0, {classes}): Trellis "
                    "averages over every position")
    return _Tensor(c.op("cross_entropy", logits, targets))


def _sdpa(c: _Converter, node: Any, query: Any, key: Any, value: Any,
          attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: Optional[float] = None,
          enable_gqa: bool = False) -> Any:
    if dropout_p:
        raise Error(f"attention dropout {dropout_p}: call module.eval()")
    causal = bool(is_causal)
    window = 0
    if attn_mask is not None:
        if not isinstance(attn_mask, _Constant):
            raise Error("scaled_dot_product_attention with a mask computed "
                        "from the inputs (a padding mask): graph.attention "
                        "masks causally (perhaps with a sliding window) or "
                        "not at all")
        window = _causal_window(attn_mask.tensor, query.shape[-2],
                                key.shape[-2])
        if window is None:
            kind = ("boolean" if attn_mask.tensor.dtype == torch.bool
                    else "additive")
            raise Error(f"scaled_dot_product_attention with a {kind} mask "
                        "that is neither causal nor a causal sliding window: "
                        "graph.attention masks causally (perhaps with a "
                        "sliding window) or not at all")
        causal = True
    head_dim = query.shape[-1]
    return _attention(c, node, query, key, value,
                      scale if scale is not None else 1 / math.sqrt(head_dim),
                      causal, window)


def _attention(c: _Converter, node: Any, query: Any, key: Any, value: Any,
               scale: float, causal: bool, window: int = 0,
               softcap: Optional[float] = None,
               sinks: Optional[_Tensor] = None,
               slopes: Optional[_Tensor] = None) -> _Tensor:
    """graph.attention on logical [batch, heads, seq, dim] operands; the
    result is logical [batch, heads, seq, dim] too. `window` > 0: a causal
    sliding window; `softcap`: scores soft-capped (Gemma 2); `sinks`: a
    logit per query head in each softmax's denominator (GPT-OSS); `slopes`:
    ALiBi's, a slope per query head times the key's distance (BLOOM).
    Values of
    another width than the queries and keys (DeepSeek's v_head_dim) are
    attended padded with zero features to the wider, which changes no score
    and no output feature, and the result sliced back."""
    to_bshd = (0, 2, 1, 3)
    width = max(int(query.shape[3]), int(value.shape[3]))

    def operand(v: Any) -> Any:
        placed = c.materialize(_permute(c, node, v, to_bshd))
        features = int(v.shape[3])
        if features == width:
            return placed
        return c.emit("pad", placed, low=[0, 0, 0, 0],
                      high=[0, 0, 0, width - features])

    attrs: Dict[str, Any] = {"scale": float(scale),
                             "causal": Attr("true" if causal else "false")}
    if window:
        attrs["window"] = int(window)
    if softcap is not None:
        attrs["softcap"] = float(softcap)
    extras = [c.materialize(v) for v in (slopes, sinks) if v is not None]
    if extras:
        attrs["operandSegmentSizes"] = Attr(
            f"array<i32: 1, 1, 1, {int(slopes is not None)}, "
            f"{int(sinks is not None)}>")
    out = c.emit("attention", operand(query), operand(key), operand(value),
                 *extras, **attrs)
    result = _Tensor(out, to_bshd)
    if int(value.shape[3]) == width:
        return result
    return _slice(c, node, result, 3, 0, int(value.shape[3]))


# -- patterns -------------------------------------------------------------


def _assert_metadata(c: _Converter, node: Any, *args: Any, **kwargs: Any) -> Any:
    return None


# -- mixture of experts (the custom ops of _moe.py) ------------------------

def route_operands(c: _Converter, node: Any, logits: Any, bias: Any,
                   top_k: int, sigmoid: bool, normalize: bool, scaling: float,
                   groups: int, top_groups: int, group_top: int) -> Any:
    """moe_route with its attributes; `bias` the correction bias as a
    graph value, or None."""
    attrs: Dict[str, Any] = {"top_k": int(top_k)}
    if sigmoid:
        attrs["scoring"] = "sigmoid"
    if normalize:
        attrs["normalize"] = True
    if scaling != 1.0:
        attrs["scaling"] = float(scaling)
    if groups > 1:
        attrs.update(groups=int(groups), top_groups=int(top_groups))
        if group_top != 2:
            attrs["group_top"] = int(group_top)
    operands = [logits] if bias is None else [logits, bias]
    weights, experts = c.op("moe_route", *operands, **attrs)
    return (_Tensor(weights), _Tensor(experts))


def route_with_state(c: _Converter, node: Any, target: str) -> Any:
    """moe_route whose correction bias is the module's parameter or buffer
    `target`: a state of its name (read, loaded and saved with the
    weights, never trained: only the choice reads it, so PyTorch gives it
    no gradient either), flattened to one value per expert."""
    name = c.canonical_names.get(target, target)
    tensor = (c.exported.state_dict[target]
              if target in c.signature.parameters else c._buffer(target))
    array = tensor.detach().to(torch.float32).cpu().numpy().copy()
    c.weights[name] = array
    state: Any = _Tensor(c.graph.state(name, list(array.shape)))
    if array.ndim != 1:
        state = _reshape(c, state, [array.size])
    logits = c.convert(node.args[0])
    return route_operands(c, node, logits, state, *node.args[2:])


def _moe_route(c: _Converter, node: Any, logits: Any, bias: Any, top_k: int,
               sigmoid: bool, normalize: bool, scaling: float, groups: int,
               top_groups: int, group_top: int) -> Any:
    if bias is not None:  # route_with_state takes a parameter's or buffer's
        raise Error("a router's correction bias computed in forward: "
                    "Trellis holds it as a state, so it must be a "
                    "parameter or buffer of the module")
    return route_operands(c, node, logits, None, top_k, sigmoid, normalize,
                          scaling, groups, top_groups, group_top)


def _expert_matmul(c: _Converter, node: Any, lhs: Any, weight: Any,
                   experts: Any, transpose_rhs: bool) -> Any:
    return _Tensor(c.op("expert_matmul", lhs, weight, experts,
                        transpose_rhs=transpose_rhs))


_HANDLERS: Dict[Any, Callable[..., Any]] = {
    aten.embedding.default: _embedding,
    aten.linear.default: _linear,
    aten.addmm.default: _addmm,
    aten.baddbmm.default: _addmm,
    aten.matmul.default: _matmul,
    aten.mm.default: _matmul,
    aten.bmm.default: _matmul,
    aten.layer_norm.default: _layer_norm,
    aten.softmax.int: _softmax,
    aten._softmax.default: _softmax,
    aten.scaled_dot_product_attention.default: _sdpa,
    aten.gelu.default: _gelu,
    aten.silu.default: _unary("silu"),
    aten.relu.default: _unary("relu"),
    aten.softplus.default: _softplus,
    aten.abs.default: _unary("abs"),
    aten.sigmoid.default: _unary("sigmoid"),
    aten.tanh.default: _unary("tanh"),
    aten.exp.default: _unary("exp"),
    aten.log.default: _unary("log"),
    aten.sqrt.default: _unary("sqrt"),
    aten.rsqrt.default: _unary("rsqrt"),
    aten.neg.default: _unary("neg"),
    aten.add.Tensor: _binary("add"),
    aten.sub.Tensor: _binary("sub"),
    aten.rsub.Scalar: _rsub,
    aten.mul.Tensor: _binary("mul"),
    aten.div.Tensor: _binary("div"),
    aten.maximum.default: _binary("maximum"),
    aten.clamp.default: _clamp,
    aten.new_ones.default: _new_full(1.0),
    aten.new_zeros.default: _new_full(0.0),
    aten.zeros_like.default: _filled_like(0.0),
    aten.ones_like.default: _filled_like(1.0),
    aten.full_like.default: _filled_like(None),
    aten.pow.Tensor_Scalar: _pow,
    aten.mean.dim: _reduce("reduce_mean"),
    aten.sum.dim_IntList: _reduce("reduce_sum"),
    aten.amax.default: _reduce("reduce_max"),
    aten.max.dim: _max_dim,
    aten.view.default: _view,
    aten.reshape.default: _view,
    aten._unsafe_view.default: _view,
    aten.flatten.using_ints: _flatten,
    aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.dim: _squeeze,
    aten.squeeze.dims: _squeeze,
    aten.transpose.int: _transpose,
    aten.permute.default: _permute,
    aten.t.default: _t,
    aten.expand.default: _expand,
    aten.view_as.default: _view_as,
    aten.repeat.default: _repeat,
    aten.rms_norm.default: _rms_norm,
    aten.slice.Tensor: _slice,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split,
    aten.chunk.default: _chunk,
    aten.index.Tensor: _index,
    aten.select.int: _select,
    aten.unbind.int: _unbind,
    aten.unflatten.int: _unflatten,
    aten.numpy_T.default: _numpy_t,
    aten.cat.default: _cat,
    aten.stack.default: _stack,
    aten.square.default: _square,
    aten.view_as_complex.default: _complex,
    aten.view_as_real.default: _complex,
    aten.new_empty.default: _new_empty,
    aten.copy.default: _copy,
    aten.slice_scatter.default: _slice_scatter,
    aten.cross_entropy_loss.default: _cross_entropy,
    aten.to.dtype: _to,
    aten.to.dtype_layout: _to,
    aten._to_copy.default: _to,
    aten.to.device: _to,
    aten.type_as.default: _identity,
    aten.dropout.default: _dropout,
    aten.native_dropout.default: _native_dropout,
    aten.alias.default: _identity,
    aten.contiguous.default: _identity,
    aten.clone.default: _identity,
    aten.detach.default: _identity,
    aten._assert_tensor_metadata.default: _assert_metadata,
    torch.ops.trellis.moe_route.default: _moe_route,
    torch.ops.trellis.expert_matmul.default: _expert_matmul,
}

# Python's operator.getitem picks a piece of split.
_HANDLERS[operator.getitem] = _getitem

#: The ATen ops (and Python calls) trellis.torch translates.
SUPPORTED_OPS: List[str] = sorted(str(op) for op in _HANDLERS)
