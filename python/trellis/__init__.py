"""Trellis from Python: compile a model into a training plan, run it.

    import numpy as np, trellis
    plan = trellis.compile("examples/configs/gpt2-tiny.json", mesh="dp=2",
                           batch=8, seq=64)
    tokens = np.random.default_rng(0).integers(0, 256, (8, 65), np.int32)
    losses = trellis.launch(plan, nproc=2,
                            batches=[(tokens[:, :-1], tokens[:, 1:])])

A model is a Hugging Face config (a path or a dict), MLIR text of graph ops,
a Graph built op by op, or an nn.Module through trellis.torch.from_module.
Options are those of `trellis compile`, by the same names (dashes as
underscores: adam_eps, weight_decay). Every failure raises trellis.Error
with the compiler's or runtime's message.
"""

import json
import os
from contextlib import contextmanager
from typing import (Any, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from . import _trellis
from ._attributes import Attr, dictionary_text
from ._files import kind_phrase
from ._trellis import Error

__all__ = ["Attr", "Error", "Graph", "Model", "Plan", "Session", "Value",
           "compile", "compile_options", "launch", "plan", "session_options",
           "__version__"]

__version__: str = _trellis.version()

PathLike = Union[str, "os.PathLike[str]"]


class Model:
    """A forward pass and its loss, ready to compile (again and again: each
    compile leaves it as it was)."""

    def __init__(self, handle: "_trellis.Model"):
        self._handle = handle

    @staticmethod
    def from_file(path: PathLike) -> "Model":
        """A config.json (GPT-2 or Llama) or a .mlir file of graph ops."""
        return Model(_trellis.Model.from_file(os.fspath(path)))

    @staticmethod
    def from_config(config: Union[Mapping[str, Any], str],
                    name: str = "<config>") -> "Model":
        """A Hugging Face config as a dict (or its JSON text)."""
        text = config if isinstance(config, str) else json.dumps(dict(config))
        return Model(_trellis.Model.from_text(text, "config", name))

    @staticmethod
    def from_mlir(text: str, name: str = "<mlir>") -> "Model":
        """MLIR text of graph ops with a func.func @forward."""
        return Model(_trellis.Model.from_text(text, "mlir", name))

    def mlir(self, batch: int = 1, seq: int = 1) -> str:
        """The model as MLIR (a config imported at batch x seq)."""
        return self._handle.print(batch, seq)


class Value:
    """A value of a Graph: its number, shape and dtype."""

    def __init__(self, graph: "Graph", index: int):
        self.graph = graph
        self.index = index
        shape, dtype = graph._graph.value_type(index)
        self.shape: Tuple[int, ...] = tuple(shape)
        self.dtype: str = dtype

    def __repr__(self) -> str:
        return f"Value(%{self.index}: {self.dtype}{list(self.shape)})"


class Graph:
    """A forward pass built op by op; each op's result types are inferred
    and checked as it is added, so an error names the op that cannot work.

        g = trellis.Graph()
        table = g.parameter("embed.weight", (64, 32))
        tokens = g.input("tokens", (4, 16))
        with g.part("embedding"):
            x = g.op("embedding", table, tokens)
    """

    def __init__(self) -> None:
        self._graph = _trellis.Graph()
        self._part: Tuple[str, int] = ("none", 0)

    def parameter(self, name: str, shape: Sequence[int], dtype: str = "f32",
                  init: str = "normal:0.02",
                  file_shape: Optional[Sequence[int]] = None) -> Value:
        """A parameter named `name` (its checkpoint name), initialized by
        "zeros", "ones" or "normal:STD"; `file_shape` is the shape weight
        files store its elements under when it differs."""
        index = self._graph.parameter(name, list(shape), dtype, init)
        if file_shape is not None:
            self._graph.set_file_shape(index, list(file_shape))
        return Value(self, index)

    def state(self, name: str, shape: Sequence[int]) -> Value:
        """A state argument named `name` (f32): read by the step, loaded
        from and saved with the weights, never trained (DeepSeek-V3's
        router score correction bias)."""
        return Value(self, self._graph.state(name, list(shape)))

    def input(self, name: str, shape: Sequence[int], dtype: str = "i32") -> Value:
        """An input: "tokens" and "targets" ([batch, seq] i32) are what
        sessions feed."""
        return Value(self, self._graph.input(name, list(shape), dtype))

    def set_part(self, kind: str, layer: int = 0) -> None:
        """The model part ("embedding", "layer", "head" or "none") of the
        ops added from now on (pipelines split by parts)."""
        self._graph.set_part(kind, layer)
        self._part = (kind, layer)

    @contextmanager
    def part(self, kind: str, layer: int = 0) -> Iterator[None]:
        """set_part for the ops of a `with` block."""
        previous = self._part
        self.set_part(kind, layer)
        try:
            yield
        finally:
            self.set_part(*previous)

    def location(self, name: str, file: Optional[str] = None,
                 line: int = 0) -> None:
        """Where the ops added from now on come from, for messages."""
        self._graph.set_location(name, file, line)

    def op(self, name: str, *operands: Value,
           attributes: Union[None, str, Mapping[str, Any]] = None,
           **named: Any) -> Any:
        """Adds graph op `name` ("matmul" or "graph.matmul") on `operands`;
        attributes as keywords (True: a unit attribute) or a dictionary.
        Returns its result (a tuple of them for several)."""
        if attributes is not None and named:
            raise TypeError("give attributes as keywords or as a dictionary, "
                            "not both")
        for operand in operands:
            if not isinstance(operand, Value) or operand.graph is not self:
                raise TypeError(f"{name}: operand {operand!r} is not a value of "
                                "this graph")
        full = name if "." in name else "graph." + name
        results = self._graph.op(full, [v.index for v in operands],
                                 dictionary_text(attributes if attributes
                                                 is not None else named))
        values = tuple(Value(self, r) for r in results)
        return values[0] if len(values) == 1 else values

    def finish(self, loss: Value) -> Model:
        """Ends the graph with `loss` (a scalar f32) as @forward's result."""
        return Model(self._graph.finish(loss.index))


def compile_options() -> Dict[str, Tuple[str, str]]:
    """`trellis compile`'s options as `trellis.compile` takes them: keyword
    (the flag, '_' for '-') -> (type: int, float, str or bool; help)."""
    return {key.replace("-", "_"): (kind, help)
            for key, kind, help in _trellis.compile_options()}


def session_options() -> Dict[str, Tuple[str, str]]:
    """A session's options as trellis.Session and trellis.launch take them:
    keyword (`trellis run`'s flag, '_' for '-') -> (type: int, float, str
    or bool; help)."""
    return {key.replace("-", "_"): (kind, help)
            for key, kind, help in _trellis.session_options()}


def _kinds(rows: Sequence[Tuple[str, str, str]]) -> Dict[str, str]:
    """Keyword -> type of the library's option rows (key, type, help)."""
    return {key.replace("-", "_"): kind for key, kind, _ in rows}


def _set_options(options: Any, values: Mapping[str, Any],
                 kinds: Mapping[str, str]) -> None:
    """Sets each of `values` (keywords; None: not given) on `options`, a
    compile's or a session's, through the setter of the value's type: the
    library refuses an unknown key, or a type other than its row's, naming
    what it expected. An int where `kinds` (keyword -> type) says float is
    that float; a path is a str."""
    for name, value in values.items():
        if value is None:
            continue
        key = name.replace("_", "-")
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, bool):
            options.set_bool(key, value)
        elif isinstance(value, int):
            if kinds.get(name) == "float":
                options.set_double(key, float(value))
            else:
                options.set_int(key, value)
        elif isinstance(value, float):
            options.set_double(key, value)
        elif isinstance(value, str):
            options.set_string(key, value)
        else:
            raise TypeError(f"option {name}={value!r}: expected a bool, int, "
                            "float or str")


def _expert_pieces(name: str, shape: Tuple[int, ...],
                   weights: Mapping[str, Any]) -> Optional[List[str]]:
    """The names of the per-expert arrays of the stacked parameter `name`
    (one `*`, its expert index) in `weights`, each checked against the
    parameter's shape; None when none is given. A missing, extra or
    misshapen expert is an Error naming it."""
    if name.count("*") != 1 or not shape:
        return None
    pieces = [name.replace("*", str(i)) for i in range(shape[0])]
    given = [p for p in pieces if p in weights]
    if not given:
        return None
    for index, piece in enumerate(pieces):
        if piece not in weights:
            raise Error(f"weights: missing {piece!r} (expert {index} of "
                        f"{shape[0]} of {name!r})")
        found = tuple(np.shape(weights[piece]))
        if found != tuple(shape[1:]):
            raise Error(f"weights: {piece!r} has shape {list(found)}, the "
                        f"model expects {list(shape[1:])}")
    extra = name.replace("*", str(shape[0]))
    if extra in weights:
        raise Error(f"weights: {extra!r} is expert {shape[0]} of {name!r}, "
                    f"which the model has {shape[0]} of")
    return pieces


def _require_regular_file(path: str, expected: str) -> None:
    """Raises trellis.Error unless `path` names a regular file: reading a
    character device never ends, and reading a FIFO blocks."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        kind = "does not exist"
    except OSError as error:
        kind = f"cannot be examined: {error.strerror}"
    else:
        kind = kind_phrase(mode)
    if kind:
        raise Error(f"cannot read '{path}': it {kind}, expected {expected}")


class Plan:
    """A compiled training plan: its text, report and diagnostics."""

    def __init__(self, text: str, report: Optional[str] = None,
                 diagnostics: str = ""):
        self.text = text
        self._report = report
        self.diagnostics = diagnostics
        self._handle = _trellis.Plan.from_text(text)

    @staticmethod
    def load(path: PathLike) -> "Plan":
        """A plan file (`trellis compile -o`). A path that is no regular
        file (a directory, /dev/zero, a FIFO) is refused before it is read,
        as the command line does."""
        path = os.fspath(path)
        _require_regular_file(path, "a plan file (trellis compile -o)")
        with open(path, encoding="utf-8") as file:
            return Plan(file.read())

    def save(self, path: PathLike) -> None:
        with open(os.fspath(path), "w", encoding="utf-8") as file:
            file.write(self.text)

    @property
    def num_ranks(self) -> int:
        """The ranks of the plan's mesh (the sessions it runs as)."""
        return self._handle.num_ranks()

    @property
    def mesh(self) -> str:
        return self._handle.mesh()

    def report(self) -> Dict[str, Any]:
        """Per rank: model states, memory plan, communication per step
        (docs/Report.md); needs compile(..., report=True)."""
        if self._report is None:
            raise Error("this plan was compiled without a report: pass "
                        "report=True to trellis.compile")
        return json.loads(self._report)


ModelLike = Union[Model, Graph, PathLike, Mapping[str, Any]]


def _as_model(model: Any) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, Graph):
        raise TypeError("a Graph compiles once finished: pass "
                        "graph.finish(loss)")
    if isinstance(model, (str, os.PathLike)):
        return Model.from_file(model)
    if isinstance(model, Mapping):
        return Model.from_config(model)
    raise TypeError(f"expected a trellis.Model, a path or a config dict, found "
                    f"{type(model).__name__}")


def compile(model: ModelLike, *, mesh: Optional[str] = None,
            report: bool = False, **options: Any) -> Union[Plan, str]:
    """Compiles `model` into a training plan with `trellis compile`'s
    options as keywords (trellis.compile_options() lists them with their
    types and help): batch, seq, microbatches, mesh ("dp=2,tp=2",
    "replica:data=2,model:tensor=2") or dp/tp/pp/cp, zero, zero_axes,
    schedule, lr, precision, ... With emit="mlir", returns the training
    step as MLIR text instead of a plan; with emit="estimate", the cost
    query's figures as a dict (per rank: flops, bytes, communication;
    docs/Report.md)."""
    handle = _as_model(model)._handle
    compile_options = _trellis.CompileOptions()
    _set_options(compile_options, dict(options, mesh=mesh, report=report),
                 _kinds(_trellis.compile_options()))
    compilation = _trellis.compile(handle, compile_options)
    if options.get("emit") == "mlir":
        return compilation.text()
    if options.get("emit") == "estimate":
        return json.loads(compilation.text())
    return Plan(compilation.text(),
                compilation.report() if report else None,
                compilation.diagnostics())


def plan(model: ModelLike, *, cluster: str, gpus: int, batch: int, seq: int,
         precision: str = "bf16", top: int = 5,
         evaluate: Optional[str] = None) -> Dict[str, Any]:
    """Searches `model`'s plans as `trellis plan` does (docs/Planner.md): the
    fastest that fit `gpus` devices of `cluster` (a preset: "a100-80g",
    "h100-sxm", "h200-sxm", "b200", or a cluster file) for `batch`
    sequences of `seq` tokens a step, with their predicted step time and
    memory. Returns `trellis plan --json`'s dict: "plans", best first, each
    with "compile_options" to pass on (trellis.compile(model, batch=...,
    seq=..., precision=..., **plans[0]["compile_options"])); "closest" when
    none fits. `evaluate` ("pp=2,dp=4,...") fixes what it names."""
    handle = _as_model(model)._handle
    options = _trellis.CompileOptions()
    _set_options(options, {"batch": batch, "seq": seq,
                           "precision": precision},
                 _kinds(_trellis.compile_options()))
    return json.loads(_trellis.plan_search(handle, options, cluster, gpus,
                                           top, evaluate or ""))


class Session:
    """One rank of a running plan. With a plan of several ranks, every rank
    makes its session (rank=..., and the same rendezvous directory or TCP
    store) and makes the same calls in the same order; trellis.launch does
    that from one process."""

    _PREFIXES = ("adam_m.", "adam_v.", "master.")

    def __init__(self, plan: Union[Plan, PathLike], rank: Optional[int] = None,
                 *, weights: Union[None, PathLike, Mapping[str, Any]] = None,
                 **options: Any):
        """`options` are `trellis run`'s session options as keywords ('_'
        for '-'; trellis.session_options() lists them with their types and
        help): threads, seed, timeout, rendezvous, master_addr,
        master_port, nproc, device, max_memory, on_nonfinite, load...
        `weights` is a .safetensors file, or arrays by name (written once
        the session exists)."""
        if not isinstance(plan, Plan):
            plan = Plan.load(plan)
        self.plan = plan
        # Weights as arrays by name (trellis.torch's model.weights) are
        # written once the session exists.
        named_weights = weights if isinstance(weights, Mapping) else None
        values = dict(options, rank=rank,
                      weights=None if named_weights is not None else weights)
        session_options = _trellis.SessionOptions()
        _set_options(session_options, values,
                     _kinds(_trellis.session_options()))
        self._session: Optional[_trellis.Session] = _trellis.Session(
            plan._handle, session_options)
        self.batch_size, self.seq_length, self.vocab_size = (
            self._session.batch_shape())
        self.rank: int = self._session.rank()
        if named_weights is not None:
            self.write_weights(named_weights)

    def _live(self) -> "_trellis.Session":
        if self._session is None:
            raise Error("this session was closed")
        return self._session

    def _ids(self, name: str, ids: Any) -> np.ndarray:
        array = np.asarray(ids)
        if array.dtype.kind not in "iu":
            raise Error(f"{name}: expected integer token ids, found dtype "
                        f"{array.dtype}")
        if array.shape != (self.batch_size, self.seq_length):
            raise Error(f"{name}: expected the global batch of shape "
                        f"({self.batch_size}, {self.seq_length}), found "
                        f"{array.shape}")
        # The plan takes int32 ids: a wider id would wrap into another.
        if array.size and (array.min() < 0 or
                           array.max() > np.iinfo(np.int32).max):
            bad = array.min() if array.min() < 0 else array.max()
            raise Error(f"{name}: expected token ids in [0, 2^31), found "
                        f"{int(bad)}")
        return np.ascontiguousarray(array, dtype=np.int32)

    def step(self, tokens: Any, targets: Any) -> float:
        """One training step on the global batch (arrays of shape
        (batch, seq)); every rank passes the same batch. Returns the loss."""
        return self._live().step(self._ids("tokens", tokens),
                                 self._ids("targets", targets))

    @property
    def loss(self) -> float:
        """The last step's loss."""
        return self._live().loss()

    @property
    def learning_rate(self) -> Optional[float]:
        """The rate the last step's update used, for plans compiled with a
        schedule (lr_schedule=...); None otherwise and before a step."""
        return self._live().learning_rate()

    @property
    def expert_load(self) -> Optional[np.ndarray]:
        """For a plan with mixture-of-experts layers, after a step: how many
        of its slots chose each expert, [layers, experts] (every micro-batch
        and rank counted), on the ranks that hold it; else None."""
        load = self._live().expert_load()
        return load if load.size else None

    @property
    def metrics(self) -> Dict[str, np.ndarray]:
        """The figures of the last step the plan reports, by name, each as
        the compiler pass that makes it declared it ("grad_norm": a 0-d
        array; "expert_load": [layers, experts]; ...), on the ranks that
        hold them; empty before a step."""
        return {name: values for name, _, values in self._live().metrics()
                if values is not None}

    @property
    def grad_norm(self) -> Optional[float]:
        """The last step's global gradient norm before clipping, for plans
        compiled with clip_grad=...; nan for a step an fp16 overflow
        skipped; None otherwise, before a step, and on pipeline ranks
        other than stage 0."""
        return self._live().grad_norm()

    @property
    def completed_steps(self) -> int:
        return self._live().completed_steps()

    def tensor_names(self) -> List[str]:
        """Parameters, then optimizer states ("adam_m.NAME", "adam_v.NAME")
        and fp32 masters ("master.NAME")."""
        return self._live().tensor_names()

    def parameter_names(self) -> List[str]:
        return [name for name in self.tensor_names()
                if not name.startswith(self._PREFIXES)]

    def tensor_shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._live().tensor_shape(name))

    def read(self, name: str) -> np.ndarray:
        """The whole tensor as a new float32 array (every rank must call
        it)."""
        return self._live().read(name)

    def view(self, name: str) -> np.ndarray:
        """The tensor's own memory, no copy, where this rank holds it whole
        as float32 in host memory (one rank, or a replicated tensor): each
        step updates it in place; writing into it changes this rank's copy
        only. Raises trellis.Error saying why otherwise (read copies)."""
        return self._live().view(name)

    def write(self, name: str, values: Any) -> None:
        """Sets the whole tensor (each rank keeps its piece; every rank
        passes the same values)."""
        self._live().write(name, np.ascontiguousarray(values, dtype=np.float32))

    def write_weights(self, weights: Mapping[str, Any]) -> None:
        """Sets parameters from arrays by name (their fp32 master weights
        too, under mixed precision); every parameter must be given. A
        stacked expert parameter (`experts.*.w1.weight` [E, ...]) is given
        whole or as one array per expert under the Hub's names
        (`experts.0.w1.weight`, ...), as weight files give it."""
        names = set(self.tensor_names())
        resolved: Dict[str, Any] = {}
        used = set()
        missing = []
        for name in self.parameter_names():
            if name in weights:
                resolved[name] = weights[name]
                used.add(name)
                continue
            pieces = _expert_pieces(name, self.tensor_shape(name), weights)
            if pieces is None:
                missing.append(name)
                continue
            resolved[name] = np.stack([np.asarray(weights[p], np.float32)
                                       for p in pieces])
            used.update(pieces)
        unused = [n for n in weights if n not in used]
        if missing:
            count = f" (and {len(missing) - 1} more)" if len(missing) > 1 \
                else ""
            given = ""
            if unused:
                more = f" (and {len(unused) - 5} more)" \
                    if len(unused) > 5 else ""
                given = ("; given but not a parameter: " +
                         ", ".join(repr(n) for n in unused[:5]) + more)
            raise Error(f"weights: missing parameter {missing[0]!r}{count}"
                        f"{given}")
        if unused:
            raise Error(f"weights: {unused[0]!r} is not a parameter of the "
                        "plan")
        for name, values in resolved.items():
            self.write(name, values)
            if "master." + name in names:
                self.write("master." + name, values)

    def state_dict(self) -> Dict[str, np.ndarray]:
        """Every parameter by name (every rank must call it)."""
        return {name: self.read(name) for name in self.parameter_names()}

    def save(self, dir: PathLike) -> None:
        """A checkpoint directory (model.safetensors with Hugging Face names,
        optimizer.safetensors, a manifest); every rank must call it."""
        self._live().save(os.fspath(dir))

    def load(self, dir: PathLike) -> None:
        """Resumes from a checkpoint; a refused one changes nothing."""
        self._live().load(os.fspath(dir))

    def load_weights(self, path: PathLike) -> None:
        """Parameters from a Hugging Face .safetensors file."""
        self._live().load_weights(os.fspath(path))

    def close(self) -> None:
        self._session = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


from ._launch import launch  # noqa: E402  (uses Session)
