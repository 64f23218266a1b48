"""The Python API over the C API: compiling, plans, sessions, tensors,
checkpoints, the graph builder, and every refusal as trellis.Error."""

import json
import os
import re

import numpy as np
import pytest

import trellis
from conftest import batches


def test_version_and_stubs() -> None:
    assert trellis.__version__ == "0.1.0"
    package = os.path.dirname(trellis.__file__)
    assert os.path.exists(os.path.join(package, "_trellis.pyi"))
    assert os.path.exists(os.path.join(package, "py.typed"))


def test_compile_report_and_plan_files(gpt2_tiny: str, tmp_path) -> None:
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16, report=True)
    assert plan.num_ranks == 1
    report = plan.report()
    assert report["model_parameters"] == 124672
    assert report["per_rank"]
    path = tmp_path / "gpt2.plan"
    plan.save(path)
    assert trellis.Plan.load(path).text == plan.text
    # The same model from a dict, and from its MLIR.
    with open(gpt2_tiny) as file:
        config = json.load(file)

    def content(text: str) -> dict:
        plan = json.loads(text)
        del plan["checksum"], plan["metadata"]["source"]
        return plan

    assert content(trellis.compile(config, batch=4, seq=16).text) == content(
        plan.text)
    mlir = trellis.Model.from_file(gpt2_tiny).mlir(batch=4, seq=16)
    assert "func.func @forward" in mlir
    as_mlir = trellis.compile(trellis.Model.from_mlir(mlir), seq=16)
    assert trellis.Plan(as_mlir.text).num_ranks == 1


def test_session_tensors_and_checkpoints(gpt2_tiny: str, tmp_path) -> None:
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16, lr=3e-3)
    data = batches(256, 4, 16, 4)
    with trellis.Session(plan) as session:
        assert (session.batch_size, session.seq_length,
                session.vocab_size) == (4, 16, 256)
        names = session.tensor_names()
        assert names[0] == "transformer.wte.weight"
        assert "adam_m.transformer.ln_f.bias" in names
        assert session.tensor_shape("transformer.h.0.attn.c_attn.weight") == (
            64, 192)
        table = session.read("transformer.wte.weight")
        assert table.dtype == np.float32 and table.shape == (256, 64)
        session.write("transformer.wte.weight", table * 0.5)
        np.testing.assert_array_equal(session.read("transformer.wte.weight"),
                                      table * 0.5)
        view = session.view("transformer.wte.weight")  # no copy
        losses = [session.step(*b) for b in data[:2]]
        np.testing.assert_array_equal(view, session.read(
            "transformer.wte.weight"))
        assert not np.array_equal(view, table * 0.5)  # updated in place
        assert np.shares_memory(view, session.view("transformer.wte.weight"))
        assert session.loss == losses[-1]
        assert session.completed_steps == 2
        assert session.read("adam_m.transformer.ln_f.bias").any()
        session.save(tmp_path / "checkpoint")
        weights = session.state_dict()
        assert set(weights) == set(session.parameter_names())
        later = [session.step(*b) for b in data[2:]]
    with trellis.Session(plan, load=tmp_path / "checkpoint") as resumed:
        assert resumed.completed_steps == 2
        assert [resumed.step(*b) for b in data[2:]] == later
    # Weights as arrays by name: the state after two steps, the same next
    # loss as a checkpoint's parameters with fresh moments.
    with trellis.Session(plan, weights=weights) as fresh, trellis.Session(
            plan, weights=tmp_path / "checkpoint" / "model.safetensors") as hf:
        assert fresh.step(*data[2]) == hf.step(*data[2])


def test_graph_builder_equals_mlir_text(examples: str) -> None:
    g = trellis.Graph()
    embed = g.parameter("embed.weight", (64, 32))
    ups = [g.parameter(f"layers.{i}.up.weight", (32, 128)) for i in range(2)]
    downs = [g.parameter(f"layers.{i}.down.weight", (128, 32))
             for i in range(2)]
    norm = g.parameter("norm.weight", (32,), init="ones")
    tokens = g.input("tokens", (4, 16))
    targets = g.input("targets", (4, 16))
    with g.part("embedding"):
        x = g.op("embedding", embed, tokens)
    assert x.shape == (4, 16, 32) and x.dtype == "f32"
    for i in range(2):
        with g.part("layer", i):
            g.location(f"layers.{i}", "tiny_lm.py", 10 + i)
            h = g.op("gelu", g.op("matmul", x, ups[i]))
            x = g.op("add", x, g.op("matmul", h, downs[i]))
    with g.part("head"):
        logits = g.op("matmul", g.op("rms_norm", x, norm, epsilon=1e-5), embed,
                      transpose_rhs=True)
        loss = g.op("cross_entropy", logits, targets)
    built = g.finish(loss)
    parsed = trellis.Model.from_file(os.path.join(examples, "tiny_lm.mlir"))
    data = batches(64, 4, 16, 3)
    losses = []
    for model in (built, parsed):
        for mesh in (None, "pp=2"):
            plan = trellis.compile(model, mesh=mesh)
            if mesh:
                losses.append(trellis.launch(plan, batches=data)[0])
            else:
                with trellis.Session(plan) as session:
                    losses.append([session.step(*b) for b in data])
    for other in losses[1:]:
        np.testing.assert_allclose(other, losses[0], rtol=1e-6)


def test_compile_options_come_from_the_library() -> None:
    options = trellis.compile_options()
    assert options["zero_axes"][0] == "str"
    assert options["microbatches"][0] == "int"
    assert options["lr"][0] == "float"
    assert options["sp"][0] == "bool"
    assert "role" in options["mesh"][1]


def test_open_mesh_and_integer_floats(gpt2_tiny: str) -> None:
    plan = trellis.compile(gpt2_tiny, mesh="replica:data=2,model:tensor=2",
                           batch=4, seq=16, lr=1, zero=1,
                           zero_axes="replica")
    assert plan.num_ranks == 4
    assert json.loads(plan.text.split("\n", 1)[0])["mesh"] == [
        {"name": "replica", "size": 2}, {"name": "model", "size": 2}]


def test_a_mesh_axis_outside_ascii_is_named_whole(gpt2_tiny: str) -> None:
    """A mesh axis name outside ASCII: the error names the character whole
    (the message reached Python empty when it held half of one)."""
    with pytest.raises(trellis.Error) as refused:
        trellis.compile(gpt2_tiny, mesh="d\u00e9=2", batch=4, seq=16)
    assert ("expected '=' after mesh axis \"d\", found '\u00e9' (mesh axis "
            "names and roles are ASCII letters, digits and '_')"
            in str(refused.value))


def test_emit_mlir_returns_the_step(gpt2_tiny: str) -> None:
    text = trellis.compile(gpt2_tiny, batch=4, seq=16, emit="mlir")
    assert isinstance(text, str) and "func.func @train_step" in text


def test_emit_estimate_prices_what_the_plan_reports(gpt2_tiny: str) -> None:
    """The cost query, priced before partitioning, gives the FLOPs and the
    collective bytes the partitioned plan's report counts."""
    estimate = trellis.compile(gpt2_tiny, mesh="dp=2,tp=2", batch=4, seq=16,
                               emit="estimate")
    plan = trellis.compile(gpt2_tiny, mesh="dp=2,tp=2", batch=4, seq=16,
                           report=True)
    priced, reported = estimate["per_rank"][0], plan.report()["per_rank"][0]
    assert estimate["priced"] == "before partitioning"
    assert priced["flops"] == reported["flops"] > 0
    assert priced["comm_bytes"]["all_reduce"] == \
        reported["comm_bytes"]["all_reduce"] > 0


def test_compile_errors_say_error_once(gpt2_tiny: str) -> None:
    with pytest.raises(trellis.Error) as raised:
        trellis.compile(gpt2_tiny, lr=-1.0)
    assert str(raised.value).startswith("--lr: expected a finite number")


def test_wide_token_ids_are_refused_not_wrapped(gpt2_tiny: str) -> None:
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16)
    with trellis.Session(plan) as session:
        tokens = np.zeros((4, 16), dtype=np.int64)
        tokens[1, 3] = 2**32 + 5  # would wrap to 5
        with pytest.raises(trellis.Error,
                           match=r"tokens: expected token ids in \[0, 2\^31\), "
                                 r"found 4294967301"):
            session.step(tokens, np.zeros((4, 16), dtype=np.int64))
        tokens[1, 3] = -1
        with pytest.raises(trellis.Error, match="found -1"):
            session.step(tokens, np.zeros((4, 16), dtype=np.int64))
        # The session is still usable.
        assert np.isfinite(session.step(np.zeros((4, 16), dtype=np.int64),
                                        np.zeros((4, 16), dtype=np.int64)))


def test_errors(gpt2_tiny: str, tmp_path) -> None:
    with pytest.raises(trellis.Error, match="it does not exist"):
        trellis.compile("/nonexistent/model.json")
    with pytest.raises(trellis.Error, match="field \"n_layer\""):
        trellis.compile({"model_type": "gpt2", "n_layer": 0})
    with pytest.raises(trellis.Error, match="unknown compile option 'dpp'"):
        trellis.compile(gpt2_tiny, dpp=2)
    with pytest.raises(trellis.Error, match="takes a string, found an integer"):
        trellis.compile(gpt2_tiny, mesh=2)
    with pytest.raises(trellis.Error, match="is not divisible by tp=3"):
        trellis.compile(gpt2_tiny, mesh="tp=3", batch=4, seq=16)
    with pytest.raises(trellis.Error, match="compiled without a report"):
        trellis.compile(gpt2_tiny, batch=4, seq=16).report()
    with pytest.raises(TypeError, match="graph.finish"):
        trellis.compile(trellis.Graph())

    g = trellis.Graph()
    w = g.parameter("w", (4, 8))
    with pytest.raises(trellis.Error, match="contracting sizes differ"):
        g.op("matmul", w, w)
    with pytest.raises(trellis.Error, match="unknown graph op 'graph.conv2d'"):
        g.op("conv2d", w)
    with pytest.raises(TypeError, match="not a value of this graph"):
        g.op("add", w, trellis.Graph().parameter("x", (4, 8)))
    # Attention's optional slopes and sinks: given, they are named.
    q = g.parameter("q", (1, 4, 2, 8))
    sinks = g.parameter("sinks", (2,))
    with pytest.raises(trellis.Error, match=re.escape(
            "with 4 operands, say which optional operands they include in "
            "operandSegmentSizes (one count per operand of the op, such as "
            "array<i32: 1, 1, 1, 0, 1>)")):
        g.op("attention", q, q, q, sinks, scale=0.5)
    assert g.op("attention", q, q, q, sinks, scale=0.5,
                operandSegmentSizes=trellis.Attr(
                    "array<i32: 1, 1, 1, 0, 1>")).shape == (1, 4, 2, 8)
    assert g.op("attention", q, q, q, scale=0.5).shape == (1, 4, 2, 8)
    with pytest.raises(trellis.Error, match="expected the loss to be a scalar"):
        g.finish(w)

    plan = trellis.compile(gpt2_tiny, batch=4, seq=16)
    session = trellis.Session(plan)
    tokens = np.zeros((4, 16), np.int32)
    with pytest.raises(trellis.Error, match=r"expected the global batch of "
                       r"shape \(4, 16\), found \(4, 15\)"):
        session.step(tokens[:, :15], tokens[:, :15])
    with pytest.raises(trellis.Error, match="expected integer token ids"):
        session.step(tokens.astype(np.float32), tokens)
    bad = tokens.copy()
    bad[0, 3] = 256
    with pytest.raises(trellis.Error, match=r"tokens\[0, 3\] is 256"):
        session.step(bad, tokens)
    with pytest.raises(trellis.Error, match="no tensor named \"wte\""):
        session.read("wte")
    with pytest.raises(ValueError, match="has shape \\(64,\\), found an array "
                       "of shape \\(3,\\)"):
        session.write("transformer.ln_f.bias", np.zeros(3))
    with pytest.raises(trellis.Error, match="holds NaN"):
        session.write("transformer.ln_f.bias", np.full(64, np.nan))
    with pytest.raises(trellis.Error, match="missing parameter"):
        session.write_weights({})
    with pytest.raises(trellis.Error, match="session option 'threads'"):
        trellis.Session(plan, threads="2")
    # The keywords are the session option table's rows.
    options = trellis.session_options()
    assert options["threads"][0] == "int" and options["timeout"][0] == "float"
    assert "master_port" in options and "steps" not in options
    with pytest.raises(trellis.Error, match="unknown session option 'thread': "
                       "expected one of device, host, "):
        trellis.Session(plan, thread=2)
    with pytest.raises(trellis.Error, match="--threads in \\[1, 4096\\]"):
        trellis.Session(plan, threads=0)
    # max_memory is in MiB, an integer or a number (one row of trellis run's
    # option table), checked before the session starts.
    with pytest.raises(trellis.Error, match="session option 'max-memory': "
                       "expected --max-memory MiB >= 0, found -1"):
        trellis.Session(plan, max_memory=-1)
    trellis.Session(plan, max_memory=4096).close()
    session.close()
    with pytest.raises(trellis.Error, match="this session was closed"):
        session.step(tokens, tokens)


def test_unreadable_plan_paths_are_refused_before_reading(tmp_path) -> None:
    """Plan.load refuses what is no regular file, as the command line
    does: /dev/zero would be read without end, a FIFO would block."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    for path, kind in [("/dev/zero", "is a character device"),
                       (fifo, "is a FIFO"),
                       (str(tmp_path), "is a directory"),
                       (str(tmp_path / "absent.plan"), "does not exist")]:
        with pytest.raises(trellis.Error, match=f"cannot read '{path}': it "
                           f"{kind}, expected a plan file"):
            trellis.Plan.load(path)


def test_a_failed_save_leaves_the_session_usable(gpt2_tiny: str,
                                                 tmp_path) -> None:
    """Writing a checkpoint is rank 0's alone: a mistyped path fails the
    save, not the session, so the trained state is not lost."""
    plan = trellis.compile(gpt2_tiny, batch=4, seq=16)
    tokens = np.zeros((4, 16), np.int32)
    with trellis.Session(plan) as session:
        session.step(tokens, tokens)
        with pytest.raises(trellis.Error, match="cannot create checkpoint "
                           "directory"):
            session.save(tmp_path / "missing" / "dir" / "checkpoint")
        session.step(tokens, tokens)
        session.save(tmp_path / "checkpoint")
        assert session.completed_steps == 2
    assert sorted(os.listdir(tmp_path / "checkpoint")) == [
        "config.json", "manifest.json", "model.safetensors",
        "optimizer.safetensors"]
