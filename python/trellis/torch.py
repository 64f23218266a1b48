"""trellis.torch: a PyTorch nn.Module as a Trellis model.

    model = trellis.torch.from_module(GPT2LMHeadModel(config), (tokens, targets))
    plan = trellis.compile(model, mesh="dp=2")
    losses = trellis.launch(plan, nproc=2, batches=[(tokens, targets)],
                            weights=model.weights)

The module goes through torch.export; its ATen graph becomes graph ops. The
module's parameter names are kept (presets and checkpoints match them), its
weights travel with the model (`weights`), and its layers (the ModuleList
holding most parameters) become the model parts pipelines split by.

What depends on no parameter and no input (position ids, causal masks,
rotary tables, the buffers they read) is computed once here, in PyTorch, and
must then be one of what graph ops express: a scalar, position ids, a causal
mask (into attention), a rotary table (into rope). Attention written out
(matmul, scale, mask, softmax, matmul; grouped-query heads repeated) becomes
graph.attention, Hugging Face's rotate-half rotary embedding graph.rope, and
RMSNorm's decomposition graph.rms_norm. The first ATen op without a
translation is an error naming it and its source line.
"""

import math
import operator
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import Attr, Error, Graph, Model

try:
    import torch
    import torch.nn.functional
except ImportError as _error:  # pragma: no cover - depends on the machine
    raise ImportError("trellis.torch needs PyTorch (pip install torch)") from _error

aten = torch.ops.aten

__all__ = ["TorchModel", "from_module", "SUPPORTED_OPS"]


class TorchModel(Model):
    """A model converted from an nn.Module, with the module's weights."""

    def __init__(self, handle: Any, weights: Dict[str, np.ndarray]):
        super().__init__(handle)
        #: The module's parameters by the names the plan uses.
        self.weights = weights


def _default_loss(output: Any, targets: "torch.Tensor") -> "torch.Tensor":
    logits = output.logits if hasattr(output, "logits") else output
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                             targets.flatten())


class _WithLoss(torch.nn.Module):
    """The module and its loss: forward(tokens, targets) -> scalar."""

    def __init__(self, module: "torch.nn.Module",
                 loss: Callable[[Any, "torch.Tensor"], "torch.Tensor"]):
        super().__init__()
        self.m = module
        self.loss = loss

    def forward(self, tokens: "torch.Tensor",
                targets: "torch.Tensor") -> "torch.Tensor":
        output = self.m(tokens)
        return self.loss(output, targets)


class _Tensor:
    """A converted value: `value` permuted by `perm` (logical dimension i is
    the value's dimension perm[i]), so transposes cost nothing until a
    layout is needed."""

    __slots__ = ("value", "perm")

    def __init__(self, value: Any, perm: Optional[Tuple[int, ...]] = None):
        self.value = value
        self.perm = perm if perm is not None else tuple(range(len(value.shape)))

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.value.shape[p] for p in self.perm)


class _Constant:
    """A value that depends on no parameter and no input: computed here."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any):
        self.tensor = tensor


def _source_line(node: Any) -> Tuple[Optional[str], int]:
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if not frames:
        return None, 0
    file, line = frames[-1]
    return file, int(line)


def _describe(node: Any) -> str:
    """`aten.op (node, in module.path, at file:line)`."""
    file, line = _source_line(node)
    module = _module_path(node)
    parts = [node.name] + ([f"in {module}"] if module else []) + (
        [f"at {file}:{line}"] if file else [])
    return f"{node.target} ({', '.join(parts)})"


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path[2:] if path.startswith("m.") else ("" if path == "m" else path)


def _normalize_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim


def _is_causal_mask(mask: Any, rows: int, cols: int) -> bool:
    """0 on and below the diagonal, at most -1e30 above, in every batch."""
    if mask.dim() < 2 or mask.shape[-2:] != (rows, cols):
        return False
    flat = mask.reshape(-1, rows, cols).to(torch.float64)
    allowed = torch.ones(rows, cols, dtype=torch.bool).tril(cols - rows)
    return bool((flat[:, allowed] == 0).all() and
                (flat[:, ~allowed] <= -1e30).all())


class _Converter:
    def __init__(self, exported: Any, module: "torch.nn.Module",
                 names: Dict[str, str]):
        self.exported = exported
        self.graph_module = exported.graph_module
        self.graph = Graph()
        self.signature = exported.graph_signature
        self.module = module
        self.canonical_names = names
        self.env: Dict[Any, Any] = {}
        self.weights: Dict[str, np.ndarray] = {}
        self.order = {node: i for i, node in enumerate(self.graph_module.graph.nodes)}
        self.layers_prefix = self._layers_prefix()
        self.first_layer_index = min(
            (self.order[n] for n in self.order if self._layer_of(n) is not None),
            default=None)
        self.part: Tuple[str, int] = ("none", 0)
        self.location: Tuple[str, Optional[str], int] = ("", None, 0)
        self.constants = self._constant_nodes()
        # The nodes being converted, innermost last: ops take the part and
        # location of the innermost.
        self.current: List[Any] = []
        # Parameters held in another layout than the module's: placeholder
        # -> (shape, the module's shape).
        self.layouts: Dict[Any, Tuple[Tuple[int, ...], Tuple[int, ...]]] = {}
        for node in self.graph_module.graph.nodes:
            fused = _fused_split(self, node)
            if fused is not None:
                _, weight, bias, pieces, size = fused
                rows = weight.meta["val"].shape[0]
                self.layouts[weight] = ((rows, pieces, size),
                                        (rows, pieces * size))
                self.layouts[bias] = ((pieces, size), (pieces * size,))

    # -- where ops come from --------------------------------------------

    def _layers_prefix(self) -> Optional[str]:
        """The ModuleList holding most parameters: the model's layers."""
        best, best_count = None, 0
        for name, child in self.module.named_modules():
            if isinstance(child, torch.nn.ModuleList) and len(child) > 0:
                count = sum(p.numel() for p in child.parameters())
                if count > best_count:
                    best, best_count = name, count
        return None if best is None else "m." + best

    def _layer_of(self, node: Any) -> Optional[int]:
        if self.layers_prefix is None:
            return None
        stack = node.meta.get("nn_module_stack") or {}
        for path, _ in stack.values():
            if path.startswith(self.layers_prefix + "."):
                index = path[len(self.layers_prefix) + 1:].split(".")[0]
                if index.isdigit():
                    return int(index)
        return None

    def _enter(self, node: Any) -> None:
        """Sets the part and location of the ops `node` becomes."""
        layer = self._layer_of(node)
        if layer is not None:
            part = ("layer", layer)
        elif self.first_layer_index is None:
            part = ("none", 0)
        elif self.order[node] < self.first_layer_index:
            part = ("embedding", 0)
        else:
            part = ("head", 0)
        if part != self.part:
            self.graph.set_part(*part)
            self.part = part
        file, line = _source_line(node)
        location = (_module_path(node) or node.name, file, line)
        if location != self.location:
            self.graph.location(*location)
            self.location = location

    # -- constants --------------------------------------------------------

    def _constant_nodes(self) -> set:
        """Nodes that depend on no parameter and no user input."""
        varying = set()
        for node in self.graph_module.graph.nodes:
            if node.op == "placeholder":
                if (node.name in self.signature.inputs_to_parameters or
                        node.name in self.signature.user_inputs):
                    varying.add(node)
            elif node.op == "call_function":
                if any(arg in varying for arg in node.all_input_nodes):
                    varying.add(node)
        return {n for n in self.graph_module.graph.nodes
                if n.op in ("placeholder", "call_function") and n not in varying}

    def _constant_value(self, node: Any) -> Any:
        if node.op == "placeholder":
            if node.name in self.signature.inputs_to_buffers:
                return self._buffer(self.signature.inputs_to_buffers[node.name])
            if node.name in self.signature.inputs_to_lifted_tensor_constants:
                return self.exported.constants[
                    self.signature.inputs_to_lifted_tensor_constants[node.name]]
            raise Error(f"cannot read the constant input {node.name}")
        args = torch.fx.node.map_arg(node.args, self._torch_value)
        kwargs = torch.fx.node.map_arg(node.kwargs, self._torch_value)
        with torch.no_grad():
            return node.target(*args, **kwargs)

    def _buffer(self, name: str) -> Any:
        """A buffer's value (non-persistent ones are the export's
        constants)."""
        if name in self.exported.state_dict:
            return self.exported.state_dict[name]
        return self.exported.constants[name]

    def _torch_value(self, node: Any) -> Any:
        value = self.convert(node)
        if isinstance(value, _Constant):
            return value.tensor
        raise Error(f"{_describe(node)} is computed from the model's inputs "
                    "where a value known before training is expected")

    # -- the walk -----------------------------------------------------------

    def convert(self, node: Any) -> Any:
        if node in self.env:
            return self.env[node]
        if node in self.constants:
            value: Any = _Constant(self._constant_value(node))
        elif node.op == "placeholder":
            value = self._placeholder(node)
        elif node.op == "call_function":
            value = self._call(node)
        else:
            raise Error(f"unsupported FX node {node.op} {node.name}")
        self.env[node] = value
        return value

    def arg(self, value: Any) -> Any:
        """An argument: converted if it is a node (lists element-wise)."""
        if isinstance(value, torch.fx.Node):
            return self.convert(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def _placeholder(self, node: Any) -> Any:
        value = node.meta.get("val")
        shape = tuple(value.shape)
        for dim, size in enumerate(shape):
            if not isinstance(size, int):
                raise Error(f"input {node.name}: dimension {dim} is dynamic "
                            f"({size}): expected static shapes (export with "
                            "example inputs of the training shape, without "
                            "dynamic_shapes)")
        if node.name in self.signature.inputs_to_parameters:
            target = self.signature.inputs_to_parameters[node.name]
            name = self.canonical_names.get(target, target)
            tensor = self.exported.state_dict[target].detach()
            if tensor.dtype != torch.float32:
                raise Error(f"parameter {name} is {tensor.dtype}: expected "
                            "float32 (compile with precision='bf16' or 'fp16' "
                            "for mixed precision)")
            array = tensor.cpu().numpy().copy()
            self.weights[name] = array
            init = ("zeros" if not array.any() else
                    "ones" if (array == 1).all() else
                    f"normal:{float(array.std()):.6g}")
            held, stored = self.layouts.get(node, (shape, None))
            return _Tensor(self.graph.parameter(name, held, "f32", init,
                                                file_shape=stored))
        if node.name in self.signature.user_inputs:
            if value.dtype not in (torch.int32, torch.int64):
                raise Error(f"input {node.name} is {value.dtype}: expected "
                            "integer token ids")
            return _Tensor(self.graph.input(node.name, shape, "i32"))
        raise Error(f"input {node.name} is neither a parameter nor an input")

    def _call(self, node: Any) -> Any:
        handler = _HANDLERS.get(node.target)
        if handler is None:
            raise Error(f"unsupported ATen op {_describe(node)}: "
                        "trellis.torch.SUPPORTED_OPS lists those it translates")
        self.current.append(node)
        try:
            # Patterns first, on the unconverted graph: what they absorb is
            # never converted.
            for pattern in _PATTERNS.get(node.target, ()):
                matched = pattern(self, node)
                if matched is not None:
                    return matched
            args = [self.arg(a) for a in node.args]
            kwargs = {k: self.arg(v) for k, v in node.kwargs.items()}
            return handler(self, node, *args, **kwargs)
        except Error as error:
            if str(error).startswith(("unsupported", "at ", "input ",
                                      "parameter ")):
                raise
            raise Error(f"at {_describe(node)}: {error}") from None
        finally:
            self.current.pop()

    # -- emitting -------------------------------------------------------------

    def emit(self, name: str, *operands: Any, **attributes: Any) -> Any:
        """Adds a graph op in the part and at the location of the node being
        converted."""
        if self.current:
            self._enter(self.current[-1])
        return self.graph.op(name, *operands, **attributes)

    def op(self, name: str, *operands: Any, **attributes: Any) -> Any:
        return self.emit(name, *[self.materialize(o) for o in operands],
                         **attributes)

    def materialize(self, value: Any) -> Any:
        """A graph value with the logical layout."""
        if isinstance(value, _Constant):
            return self.materialize(self.constant_tensor(value))
        if not isinstance(value, _Tensor):
            raise Error(f"expected a tensor, found {value!r}")
        if value.perm == tuple(range(len(value.perm))):
            return value.value
        return self.emit("transpose", value.value,
                         permutation=list(value.perm))

    def constant_tensor(self, constant: _Constant) -> _Tensor:
        """A constant as graph ops: a tensor of one value only."""
        tensor = constant.tensor
        if not isinstance(tensor, torch.Tensor):
            tensor = torch.tensor(tensor)
        flat = tensor.reshape(-1)
        if flat.numel() > 0 and bool((flat == flat[0]).all()):
            return _Tensor(self.emit("fill", shape=list(tensor.shape),
                                     value=float(flat[0])))
        raise Error(f"a constant tensor of shape {tuple(tensor.shape)} (from "
                    "the module's buffers or shapes) enters the computation: "
                    "graph ops express constants that are one value, position "
                    "ids, causal masks and rotary tables only")

    def scalar_operand(self, value: Any, shape: Tuple[int, ...]) -> Any:
        """A Python number or one-valued constant as a tensor to broadcast."""
        if isinstance(value, (int, float)):
            return _Tensor(self.emit("fill", shape=[1] * len(shape) or [1],
                                     value=float(value)))
        if isinstance(value, _Constant):
            return self.constant_tensor(value)
        return value


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


def _slice(c: _Converter, node: Any, value: Any, dim: int = 0,
           start: Optional[int] = None, end: Optional[int] = None,
           step: int = 1) -> Any:
    shape = value.shape
    dim = _normalize_dim(dim, len(shape))
    begin, stop, stride = slice(start, end, step).indices(shape[dim])
    if stride != 1:
        raise Error(f"a slice with step {step}: expected step 1")
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


def _getitem(c: _Converter, node: Any, values: Any, index: int) -> Any:
    return values[index]


def _cat(c: _Converter, node: Any, values: Sequence[Any], dim: int = 0) -> Any:
    rank = len(node.meta["val"].shape)
    kept = [v for v in values
            if not (isinstance(v, _Constant) and v.tensor.numel() == 0)]
    if len(kept) == 1:
        return kept[0]
    return _Tensor(c.op("concat", *kept, dim=_normalize_dim(dim, rank)))


def _embedding(c: _Converter, node: Any, table: Any, ids: Any, *rest: Any) -> Any:
    if isinstance(ids, _Constant):
        positions = ids.tensor
        length = positions.shape[-1]
        expected = torch.arange(length, dtype=positions.dtype)
        if not bool((positions.reshape(-1, length) == expected).all()):
            raise Error("an embedding read at constant ids that are not the "
                        "positions 0 .. n-1")
        rows = c.emit("embedding", c.materialize(table),
                          c.emit("positions", length=length))
        return _reshape(c, _Tensor(rows), tuple(node.meta["val"].shape))
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
    if beta != 1 or alpha != 1:
        raise Error(f"addmm with beta={beta}, alpha={alpha}")
    left, transpose_lhs = _matmul_flags(c, lhs)
    right, transpose_rhs = _matmul_flags(c, rhs)
    out = c.emit("matmul", left, right, transpose_lhs=transpose_lhs,
                     transpose_rhs=transpose_rhs)
    return _Tensor(c.emit("add", out, c.materialize(bias)))


def _layer_norm(c: _Converter, node: Any, value: Any, shape: Sequence[int],
                weight: Any = None, bias: Any = None, eps: float = 1e-5,
                cudnn: Any = None) -> Any:
    if len(shape) != 1:
        raise Error(f"layer_norm over {list(shape)}: expected the last "
                    "dimension only")
    if weight is None or bias is None:
        raise Error("layer_norm without a weight or a bias: expected both "
                    "(elementwise_affine=True, bias=True)")
    return _Tensor(c.op("layer_norm", value, weight, bias, epsilon=float(eps)))


def _cross_entropy(c: _Converter, node: Any, logits: Any, targets: Any,
                   weight: Any = None, reduction: int = 1,
                   ignore_index: int = -100, label_smoothing: float = 0.0) -> Any:
    if weight is not None or reduction != 1 or label_smoothing:
        raise Error("cross_entropy with class weights, a reduction other "
                    "than the mean, or label smoothing")
    return _Tensor(c.op("cross_entropy", logits, targets))


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


def _fused_split(c: _Converter, node: Any) -> Optional[Tuple[Any, ...]]:
    """split(view(addmm(b, view(x, [-1, K]), W), [..., N]), N / p, -1): a
    fused projection (GPT-2's QKV) whose p outputs are used apart; returns
    (x, W, b, p, N / p). Its weight is then held as [K, p, N / p] and its
    bias as [p, N / p], as the importer holds them, so that a preset splits
    each piece by heads."""
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
    view = _producer(value, aten.view.default, aten.reshape.default)
    addmm = _producer(view.args[0], aten.addmm.default) if view else None
    if not addmm or len(addmm.args) > 3 or addmm.kwargs:
        return None
    inner = _producer(addmm.args[1], aten.view.default, aten.reshape.default)
    bias, weight = addmm.args[0], addmm.args[2]
    parameters = c.signature.inputs_to_parameters
    if not inner or not all(
            isinstance(p, torch.fx.Node) and p.name in parameters and
            len(p.users) == 1 for p in (bias, weight)):
        return None
    source = inner.args[0]
    if tuple(source.meta["val"].shape)[:-1] != shape[:-1] or \
            tuple(weight.meta["val"].shape) != (source.meta["val"].shape[-1],
                                                shape[-1]):
        return None
    return source, weight, bias, shape[-1] // size, size


def _match_fused_split(c: _Converter, node: Any) -> Optional[List[_Tensor]]:
    fused = _fused_split(c, node)
    if fused is None:
        return None
    source, weight_node, bias_node, pieces, size = fused
    x = c.materialize(c.convert(source))
    weight = c.convert(weight_node).value
    bias = c.convert(bias_node).value
    rows = weight.shape[0]
    outputs = []
    for piece in range(pieces):
        w = c.emit("reshape", c.emit("slice", weight, offsets=[0, piece, 0],
                                     sizes=[rows, 1, size]),
                   shape=[rows, size])
        b = c.emit("reshape", c.emit("slice", bias, offsets=[piece, 0],
                                     sizes=[1, size]), shape=[size])
        outputs.append(_Tensor(c.emit("add", c.emit("matmul", x, w), b)))
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


def _sdpa(c: _Converter, node: Any, query: Any, key: Any, value: Any,
          attn_mask: Any = None, dropout_p: float = 0.0,
          is_causal: bool = False, scale: Optional[float] = None,
          enable_gqa: bool = False) -> Any:
    if dropout_p:
        raise Error(f"attention dropout {dropout_p}: call module.eval()")
    causal = bool(is_causal)
    if attn_mask is not None:
        if not (isinstance(attn_mask, _Constant) and _is_causal_mask(
                attn_mask.tensor, query.shape[-2], key.shape[-2])):
            raise Error("scaled_dot_product_attention with a mask that is not "
                        "the causal mask")
        causal = True
    head_dim = query.shape[-1]
    return _attention(c, node, query, key, value,
                      scale if scale is not None else 1 / math.sqrt(head_dim),
                      causal)


def _attention(c: _Converter, node: Any, query: Any, key: Any, value: Any,
               scale: float, causal: bool) -> _Tensor:
    """graph.attention on logical [batch, heads, seq, dim] operands; the
    result is logical [batch, heads, seq, dim] too."""
    to_bshd = (0, 2, 1, 3)

    def operand(v: Any) -> Any:
        return c.materialize(_permute(c, node, v, to_bshd))

    out = c.emit("attention", operand(query), operand(key), operand(value),
                 scale=float(scale), causal=Attr("true" if causal else "false"))
    return _Tensor(out, to_bshd)


# -- patterns -------------------------------------------------------------

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
    key/value heads graph.attention reads directly."""
    reshape = _producer(node, aten.reshape.default, aten.view.default)
    if not reshape:
        return node
    expand = _producer(reshape.args[0], aten.expand.default)
    if not expand:
        return node
    unsqueeze = _producer(expand.args[0], aten.unsqueeze.default)
    if not unsqueeze or unsqueeze.args[1] != 2:
        return node
    return unsqueeze.args[0]


def _match_attention(c: _Converter, node: Any) -> Optional[_Tensor]:
    """matmul(softmax(matmul(q, k^T) * scale [+ mask]), v)."""
    softmax = _producer(_through(node.args[0]), aten.softmax.int,
                        aten._softmax.default)
    if not softmax:
        return None
    scores = softmax.args[0]
    mask = None
    add = _producer(scores, aten.add.Tensor)
    if add is not None:
        scores, mask = add.args
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
    causal = False
    if mask is not None:
        mask_value = c.convert(mask) if isinstance(mask, torch.fx.Node) else mask
        if not (isinstance(mask_value, _Constant) and _is_causal_mask(
                mask_value.tensor, query.shape[2], key.shape[2])):
            raise Error("attention adds a mask that is not the causal mask: "
                        "graph.attention masks causally or not at all")
        causal = True
    return _attention(c, node, query, key, value, scale, causal)


def _match_rope(c: _Converter, node: Any) -> Optional[_Tensor]:
    """x * cos + cat(-x[..., d/2:], x[..., :d/2]) * sin: Hugging Face's
    rotate-half rotary embedding on x [batch, heads, seq, dim]."""
    left = _producer(node.args[0], aten.mul.Tensor)
    right = _producer(node.args[1], aten.mul.Tensor)
    if not left or not right:
        return None
    x_node, cos_node = left.args
    rotated, sin_node = right.args
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
    if cos_node not in c.constants or sin_node not in c.constants:
        return None
    x = c.convert(x_node)
    if not isinstance(x, _Tensor) or len(x.shape) != 4:
        return None
    cos = c.convert(cos_node).tensor
    sin = c.convert(sin_node).tensor
    batch, heads, seq, dim = x.shape
    half = dim // 2
    # The frequencies from the table: angle(position 1) = frequency; then
    # the whole table must be cos/sin(position * frequency).
    table_cos = cos.reshape(-1, seq, dim)[0].to(torch.float64)
    table_sin = sin.reshape(-1, seq, dim)[0].to(torch.float64)
    if seq < 2:
        raise Error("a rotary embedding over a sequence of 1: cannot tell its "
                    "frequencies")
    frequencies = torch.atan2(table_sin[1, :half], table_cos[1, :half])
    frequencies = torch.where(frequencies < 0, frequencies + 2 * math.pi,
                              frequencies)
    inverse = _rotary_frequencies(c, cos_node)
    if inverse is not None:
        frequencies = inverse.to(torch.float64)
    angles = torch.arange(seq, dtype=torch.float64)[:, None] * frequencies
    expected_cos = torch.cat([angles.cos(), angles.cos()], dim=-1)
    expected_sin = torch.cat([angles.sin(), angles.sin()], dim=-1)
    if not (torch.allclose(table_cos, expected_cos, atol=1e-5) and
            torch.allclose(table_sin, expected_sin, atol=1e-5)):
        raise Error("a rotary embedding whose cos/sin tables are not "
                    "cos/sin(position * frequency) (attention scaling or "
                    "position ids other than 0 .. n-1)")
    value = c.materialize(_permute(c, node, x, (0, 2, 1, 3)))
    out = c.emit("rope", value,
                     frequencies=[float(f) for f in frequencies])
    return _Tensor(out, (0, 2, 1, 3))


def _rotary_frequencies(c: _Converter, node: Any) -> Optional[Any]:
    """The inv_freq buffer a rotary table was computed from, if any."""
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current in seen or not isinstance(current, torch.fx.Node):
            continue
        seen.add(current)
        if current.op == "placeholder" and \
                current.name in c.signature.inputs_to_buffers:
            name = c.signature.inputs_to_buffers[current.name]
            if name.endswith("inv_freq"):
                return c._buffer(name)
        stack.extend(current.all_input_nodes)
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


def _assert_metadata(c: _Converter, node: Any, *args: Any, **kwargs: Any) -> Any:
    return None


_HANDLERS: Dict[Any, Callable[..., Any]] = {
    aten.embedding.default: _embedding,
    aten.linear.default: _linear,
    aten.addmm.default: _addmm,
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
    aten.pow.Tensor_Scalar: _pow,
    aten.mean.dim: _reduce("reduce_mean"),
    aten.sum.dim_IntList: _reduce("reduce_sum"),
    aten.amax.default: _reduce("reduce_max"),
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
    aten.slice.Tensor: _slice,
    aten.split.Tensor: _split,
    aten.split_with_sizes.default: _split,
    aten.cat.default: _cat,
    aten.cross_entropy_loss.default: _cross_entropy,
    aten.to.dtype: _to,
    aten.to.dtype_layout: _to,
    aten.to.device: _to,
    aten.type_as.default: _identity,
    aten.dropout.default: _dropout,
    aten.alias.default: _identity,
    aten.contiguous.default: _identity,
    aten.clone.default: _identity,
    aten.detach.default: _identity,
    aten._assert_tensor_metadata.default: _assert_metadata,
}

# Patterns tried, in order, before a node's operands are converted.
_PATTERNS: Dict[Any, Tuple[Callable[..., Any], ...]] = {
    aten.add.Tensor: (_match_rope,),
    aten.mul.Tensor: (_match_rms_norm,),
    aten.matmul.default: (_match_attention,),
    aten.cross_entropy_loss.default: (_match_flat_cross_entropy,),
    aten.split.Tensor: (_match_fused_split,),
    aten.view.default: (_match_flat_linear,),
    aten.reshape.default: (_match_flat_linear,),
}

# Python's operator.getitem picks a piece of split.
_HANDLERS[operator.getitem] = _getitem

#: The ATen ops (and Python calls) trellis.torch translates.
SUPPORTED_OPS: List[str] = sorted(str(op) for op in _HANDLERS)


def _canonical_names(module: "torch.nn.Module") -> Dict[str, str]:
    """Every parameter's name (under the wrapper's "m.") to the first name
    of its tensor: tied weights take one name, the one Hugging Face saves."""
    first: Dict[int, str] = {}
    names: Dict[str, str] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        canonical = first.setdefault(id(parameter), name)
        names["m." + name] = canonical
    return names


def _check_no_buffer_writes(exported: Any) -> None:
    """Refuses a forward that writes a buffer (running statistics, counters):
    state that changes outside the trained parameters has no place."""
    signature = exported.graph_signature
    mutated = sorted(signature.buffers_to_mutate.values())
    for node in exported.graph_module.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or \
                not schema.is_mutable:
            continue
        for argument, value in zip(schema.arguments, node.args):
            written = argument.alias_info is not None and \
                argument.alias_info.is_write
            if written and isinstance(value, torch.fx.Node) and \
                    value.name in signature.inputs_to_buffers:
                buffer = signature.inputs_to_buffers[value.name]
                mutated.append(f"{buffer[2:]} by {_describe(node)}")
    if mutated:
        raise Error(f"the module writes its buffers in forward ({'; '.join(mutated)}): "
                    "Trellis cannot place state that changes outside the "
                    "trained parameters")


def from_module(module: "torch.nn.Module", example_inputs: Tuple[Any, Any],
                loss: Optional[Callable[[Any, Any], Any]] = None, *,
                dynamic_shapes: Any = None) -> TorchModel:
    """Converts `module` (called as module(tokens); its output, or its
    `.logits`, the logits [batch, seq, vocab]) and its loss into a Trellis
    model at the shapes of `example_inputs` = (tokens, targets), integer
    tensors [batch, seq]. `loss(output, targets)` defaults to the mean
    cross-entropy of the logits against the targets. The module should be
    in eval mode (dropout off: Trellis steps are deterministic). Plans have
    static shapes: `dynamic_shapes` (torch.export's) is refused, naming the
    dimension."""
    if not isinstance(module, torch.nn.Module):
        raise Error(f"from_module: expected a torch.nn.Module, found "
                    f"{type(module).__name__}")
    if not isinstance(example_inputs, (tuple, list)) or len(example_inputs) != 2:
        raise Error("from_module: expected example_inputs = (tokens, targets)")
    # Copies: one tensor passed twice would be one input to torch.export.
    tokens, targets = (torch.as_tensor(t).clone() for t in example_inputs)
    if tokens.dim() != 2 or tokens.shape != targets.shape:
        raise Error(f"from_module: expected tokens and targets of one shape "
                    f"[batch, seq], found {tuple(tokens.shape)} and "
                    f"{tuple(targets.shape)}")
    for name, buffer in module.named_buffers():
        if buffer.dtype.is_floating_point and buffer.requires_grad:
            raise Error(f"buffer {name} requires grad: Trellis trains "
                        "parameters only")
    wrapper = _WithLoss(module, loss or _default_loss)
    try:
        exported = torch.export.export(wrapper, (tokens, targets),
                                       dynamic_shapes=dynamic_shapes)
    except Exception as error:  # torch's own message says what failed
        raise Error(f"from_module: torch.export failed: "
                    f"{type(error).__name__}: {error}") from None
    _check_no_buffer_writes(exported)
    converter = _Converter(exported, module, _canonical_names(module))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50000))
    try:
        output = [n for n in exported.graph_module.graph.nodes
                  if n.op == "output"][0]
        result = output.args[0]
        if isinstance(result, (tuple, list)):
            result = result[0]
        loss_value = converter.convert(result)
    finally:
        sys.setrecursionlimit(limit)
    if not isinstance(loss_value, _Tensor) or loss_value.shape != ():
        raise Error("from_module: the loss is not a scalar computed from the "
                    "inputs")
    model = converter.graph.finish(converter.materialize(loss_value))
    return TorchModel(model._handle, converter.weights)
