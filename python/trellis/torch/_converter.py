"""trellis.torch's converter: an exported ATen graph walked node by node
into graph ops, through the ATen table (_aten.py) and, before it, the
patterns that match several nodes at once (_patterns.py)."""

import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .. import Error, Graph
from . import _aten, _patterns
from ._values import _Constant, _Tensor



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
            fused = _patterns._fused_split(self, node)
            if fused is not None:
                self.layouts[fused.weight] = fused.weight_layout()
                if fused.bias is not None:
                    self.layouts[fused.bias] = (
                        (fused.pieces, fused.size),
                        (fused.pieces * fused.size,))

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

    def check_supported(self, root: Any) -> None:
        """Raises one error naming every ATen op the value `root` needs
        and no handler translates (what only constants feed is computed
        in PyTorch, whatever it is): each op once, at its first call, with
        the number of its calls."""
        needed, stack = set(), [root]
        while stack:
            node = stack.pop()
            if not isinstance(node, torch.fx.Node) or node in needed:
                continue
            needed.add(node)
            if node not in self.constants:
                stack.extend(node.all_input_nodes)
        missing: Dict[Any, List[Any]] = {}
        for node in self.exported.graph_module.graph.nodes:
            if (node in needed and node.op == "call_function" and
                    node not in self.constants and
                    node.target not in _aten._HANDLERS):
                missing.setdefault(node.target, []).append(node)
        if not missing:
            return
        described = [_describe(calls[0]) + (
            f" and {len(calls) - 1} more call{'s' if len(calls) > 2 else ''}"
            if len(calls) > 1 else "")
            for calls in missing.values()]
        kind = "op" if len(missing) == 1 else f"ops ({len(missing)})"
        raise Error(f"unsupported ATen {kind} {'; '.join(described)}: "
                    "trellis.torch.SUPPORTED_OPS lists those it translates")

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
        handler = _aten._HANDLERS.get(node.target)
        if handler is None:
            raise Error(f"unsupported ATen op {_describe(node)}: "
                        "trellis.torch.SUPPORTED_OPS lists those it translates")
        self.current.append(node)
        try:
            # Patterns first, on the unconverted graph: what they absorb is
            # never converted.
            for pattern in _patterns._PATTERNS.get(node.target, ()):
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
