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

import sys
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .. import Error, Model

try:
    import torch
    import torch.nn.functional
except ImportError as _error:  # pragma: no cover - depends on the machine
    raise ImportError("trellis.torch needs PyTorch (pip install torch)") from _error

__all__ = ["TorchModel", "from_module", "SUPPORTED_OPS"]

from ._converter import _Converter, _describe
from ._aten import SUPPORTED_OPS
from ._moe import traceable_experts
from ._values import _Tensor


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
    """The module and its loss: forward(tokens, targets) -> scalar. With
    `step`, the module computes its loss itself: step(module, tokens,
    targets) is it."""

    def __init__(self, module: "torch.nn.Module",
                 loss: Callable[[Any, "torch.Tensor"], "torch.Tensor"],
                 step: Optional[Callable[..., Any]] = None):
        super().__init__()
        self.m = module
        self.loss = loss
        self.step = step

    def forward(self, tokens: "torch.Tensor",
                targets: "torch.Tensor") -> "torch.Tensor":
        if self.step is not None:
            return self.step(self.m, tokens, targets)
        output = self.m(tokens)
        return self.loss(output, targets)


def _canonical_names(module: "torch.nn.Module") -> Dict[str, str]:
    """Every parameter's and buffer's name (under the wrapper's "m.") to
    the first name of its tensor: tied weights take one name, the one
    Hugging Face saves."""
    first: Dict[int, str] = {}
    names: Dict[str, str] = {}
    for name, tensor in [*module.named_parameters(remove_duplicate=False),
                         *module.named_buffers(remove_duplicate=False)]:
        canonical = first.setdefault(id(tensor), name)
        names["m." + name] = canonical
    return names


def _check_no_buffer_writes(exported: Any) -> None:
    """Refuses a forward that writes a buffer with state: running
    statistics (from the inputs), counters (from the buffer's own value).
    A buffer set to a value of other constants alone (LongRoPE's inv_freq,
    picked by the sequence length) holds the same after every call: it is
    no state, and the converter computes what reads it in PyTorch. Reads
    the functional program (_functional)."""
    signature = exported.graph_signature
    graph = exported.graph_module.graph
    nodes = {node.name: node for node in graph.nodes}
    varying = set(signature.inputs_to_parameters) | set(signature.user_inputs)
    mutated = []
    for spec in signature.output_specs:
        if spec.kind != torch.export.graph_signature.OutputKind.BUFFER_MUTATION:
            continue
        value = nodes[spec.arg.name]
        seen, stack, reads = set(), [value], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op == "placeholder":
                reads.add(node.name)
            stack.extend(node.all_input_nodes)
        own = {name for name, buffer in signature.inputs_to_buffers.items()
               if buffer == spec.target}
        if reads & varying or reads & own:
            name = spec.target.removeprefix("m.")  # the wrapper's prefix
            mutated.append(f"{name} by {_describe(value)}")
    if mutated:
        raise Error(f"the module writes its buffers in forward ({'; '.join(mutated)}): "
                    "Trellis cannot place state that changes outside the "
                    "trained parameters")


def _functional(exported: Any) -> Any:
    """The exported program with its in-place ops (Falcon's `add_`, `div_`)
    replaced by their functional forms: torch.export's own
    functionalization, decomposing nothing. Programs without any are kept
    as they are."""
    def mutates(node: Any) -> bool:
        schema = getattr(node.target, "_schema", None)
        return (node.op == "call_function" and schema is not None and
                schema.is_mutable)
    if not any(mutates(node) for node in exported.graph_module.graph.nodes):
        return exported
    try:
        return exported.run_decompositions({})
    except Exception as error:  # torch's own message says what failed
        raise Error(f"from_module: removing in-place ops failed: "
                    f"{type(error).__name__}: {error}") from None


def from_module(module: "torch.nn.Module", example_inputs: Tuple[Any, Any],
                loss: Optional[Callable[[Any, Any], Any]] = None, *,
                forward: Optional[Callable[..., Any]] = None,
                dynamic_shapes: Any = None) -> TorchModel:
    """Converts `module` (called as module(tokens); its output, or its
    `.logits`, the logits [batch, seq, vocab]) and its loss into a Trellis
    model at the shapes of `example_inputs` = (tokens, targets), integer
    tensors [batch, seq]. `loss(output, targets)` defaults to the mean
    cross-entropy of the logits against the targets. A module that
    computes its loss itself (nanoGPT's `logits, loss = model(idx,
    targets)`) gives `forward(module, tokens, targets)` returning the
    scalar loss instead (`loss` is then unused). The module should be in
    eval mode (dropout off: Trellis steps are deterministic). Plans have
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
    if forward is not None and not callable(forward):
        raise Error(f"from_module: forward must be callable as "
                    f"forward(module, tokens, targets), found "
                    f"{type(forward).__name__}")
    wrapper = _WithLoss(module, loss or _default_loss, forward)
    try:
        with traceable_experts(module):
            exported = torch.export.export(wrapper, (tokens, targets),
                                           dynamic_shapes=dynamic_shapes)
    except Error:
        raise
    except Exception as error:  # torch's own message says what failed
        raise Error(f"from_module: torch.export failed: "
                    f"{type(error).__name__}: {error}") from None
    exported = _functional(exported)
    _check_no_buffer_writes(exported)
    converter = _Converter(exported, module, _canonical_names(module))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 50000))
    try:
        output = [n for n in exported.graph_module.graph.nodes
                  if n.op == "output"][0]
        result = output.args[0]
        if isinstance(result, (tuple, list)):
            # The loss: the first user output (buffer writes come first).
            user = [i for i, spec in enumerate(
                exported.graph_signature.output_specs)
                if spec.kind == torch.export.graph_signature.OutputKind.
                USER_OUTPUT]
            result = result[user[0] if user else 0]
        converter.check_supported(result)
        loss_value = converter.convert(result)
    finally:
        sys.setrecursionlimit(limit)
    if not isinstance(loss_value, _Tensor) or loss_value.shape != ():
        raise Error("from_module: the loss is not a scalar computed from the "
                    "inputs")
    model = converter.graph.finish(converter.materialize(loss_value))
    return TorchModel(model._handle, converter.weights)
