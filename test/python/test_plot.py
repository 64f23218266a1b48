"""trellis plot: a run's metrics (trellis run --metrics) drawn as curves."""

import json
import os
import subprocess

import pytest

import trellis.plot


def write_metrics(path: str, records: list) -> None:
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def run_metrics(tmp_path, trellis_bin: str, examples: str) -> str:
    """The metrics of a real 6-step run with a schedule and clipping, by the
    build's trellis."""
    configs = os.path.join(examples, "configs")
    plan = str(tmp_path / "run.plan")
    metrics = str(tmp_path / "run.jsonl")
    subprocess.run([trellis_bin, "compile",
                    os.path.join(configs, "gpt2-tiny.json"), "--batch", "4",
                    "--seq", "16", "--clip-grad", "1", "--lr-schedule",
                    "cosine", "--warmup-steps", "2", "--decay-steps", "6",
                    "-o", plan], check=True)
    subprocess.run([trellis_bin, "run", plan, "--steps", "6", "--metrics",
                    metrics], check=True, stdout=subprocess.DEVNULL)
    return metrics


def test_plot_draws_a_runs_metrics(tmp_path, trellis_bin: str,
                                   examples: str) -> None:
    metrics = run_metrics(tmp_path, trellis_bin, examples)
    records = trellis.plot.read_metrics(metrics)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    for name in ("curves.png", "curves.svg"):
        output = str(tmp_path / name)
        assert trellis.plot.main([metrics, "-o", output]) == 0
        with open(output, "rb") as f:
            head = f.read(64)
        assert head.startswith(b"\x89PNG") if name.endswith(".png") \
            else b"<svg" in head or b"<?xml" in head


def test_plot_names_a_malformed_line(tmp_path, capsys) -> None:
    path = str(tmp_path / "bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"step": 1, "loss": 5.0}) + "\n")
        f.write("{not json\n")
    assert trellis.plot.main([path, "-o", str(tmp_path / "x.png")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"trellis plot: error: {path}:2: expected a JSON "
                            "object, found '{not json'")


def test_plot_refuses_records_without_a_step(tmp_path, capsys) -> None:
    path = str(tmp_path / "nostep.jsonl")
    write_metrics(path, [{"loss": 5.0}])
    assert trellis.plot.main([path]) == 1
    assert "expected a record with an integer \"step\"" in \
        capsys.readouterr().err


def test_plot_of_a_run_without_schedule_or_clipping(tmp_path) -> None:
    """Panels the run has no figure for say so instead of failing."""
    path = str(tmp_path / "plain.jsonl")
    write_metrics(path, [{"step": s, "loss": 5.0 - s / 10,
                          "tokens_per_s": 1000.0 + s} for s in range(1, 5)])
    assert trellis.plot.main([path, "-o", str(tmp_path / "plain.png")]) == 0


def test_plot_refuses_what_is_no_bounded_file(tmp_path, capsys,
                                              monkeypatch) -> None:
    """/dev/zero and a FIFO are refused at once (never read without end or
    waited on), a directory too, and a file past the bound before it is
    read."""
    fifo = str(tmp_path / "metrics.fifo")
    os.mkfifo(fifo)
    for path, kind in (("/dev/zero", "is a character device"),
                       (fifo, "is a FIFO"),
                       (str(tmp_path), "is a directory")):
        assert trellis.plot.main([path]) == 1
        assert f"cannot read '{path}': it {kind}, expected a metrics file" \
            in capsys.readouterr().err
    big = str(tmp_path / "big.jsonl")
    write_metrics(big, [{"step": s, "loss": 1.0} for s in range(1, 200)])
    monkeypatch.setattr(trellis.plot, "MAX_METRICS_BYTES", 1024)
    assert trellis.plot.main([big]) == 1
    assert "more than the 1024 bytes a metrics file may hold" in \
        capsys.readouterr().err
