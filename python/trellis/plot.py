"""Draws a run's curves from its metrics (`trellis run --metrics
FILE.jsonl`): the loss (and the eval loss when the run has one), the
learning rate, the gradient norm and the throughput against the step, one
panel each; a panel whose figure the run lacks says so. The image's format
follows the output's extension (png, svg, pdf).

    python -m trellis.plot FILE.jsonl -o curves.png
    trellis plot FILE.jsonl -o curves.png        (the same, from the CLI)

Needs matplotlib (`pip install matplotlib`)."""

import argparse
import json
import math
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from ._files import kind_phrase


class MetricsError(Exception):
    """A metrics file that cannot be drawn, with where and why."""


# A run writes a few hundred bytes a step: a million steps fit in 1 GiB.
MAX_METRICS_BYTES = 1 << 30


def _size(count: int) -> str:
    return f"{count} bytes" if count < 2**20 else f"{count / 2**20:.1f} MiB"


def _read_regular_file(path: str, max_bytes: int) -> str:
    """The text of regular file `path` of at most `max_bytes` bytes. The
    open never blocks (a FIFO is refused, not waited on) and the size comes
    from the open file, so a device is refused before it is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise MetricsError(f"cannot read '{path}': it does not exist") \
            from None
    except OSError as error:
        raise MetricsError(f"cannot read '{path}': {error.strerror}") from None
    info = os.fstat(fd)
    kind = kind_phrase(info.st_mode)
    if kind:
        os.close(fd)
        raise MetricsError(f"cannot read '{path}': it {kind}, expected a "
                           "metrics file (trellis run --metrics)")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > max_bytes:
            raise MetricsError(
                f"cannot read '{path}': it is {_size(info.st_size)}, more than "
                f"the {_size(max_bytes)} a metrics file may hold")
        try:
            data = f.read(max_bytes + 1)
        except OSError as error:
            raise MetricsError(f"cannot read '{path}': {error.strerror}") \
                from None
    if len(data) > max_bytes:
        raise MetricsError(f"cannot read '{path}': it grew past "
                           f"{_size(max_bytes)} while it was read")
    return data.decode("utf-8", errors="replace")


def read_metrics(path: str) -> List[Dict[str, Any]]:
    """The records of a metrics file, one per non-empty line; each must be
    a JSON object with an integer `step`. The file is read with a bound
    (MAX_METRICS_BYTES) and must be a regular file."""
    records = []
    lines = _read_regular_file(path, MAX_METRICS_BYTES).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise MetricsError(f"{path}:{number}: expected a JSON object, "
                               f"found {line.strip()[:40]!r} ({error.msg})") \
                from None
        if not isinstance(record, dict) or not isinstance(record.get("step"),
                                                          int):
            raise MetricsError(f"{path}:{number}: expected a record with an "
                               f"integer \"step\", found {line.strip()[:40]!r}")
        records.append(record)
    if not records:
        raise MetricsError(f"{path}: expected at least one record, found none")
    return records


def _series(records: Sequence[Dict[str, Any]], key: str):
    """(steps, values) of the records that have a finite `key`."""
    points = [(r["step"], r[key]) for r in records
              if isinstance(r.get(key), (int, float))
              and math.isfinite(r[key])]
    return [s for s, _ in points], [v for _, v in points]


def plot(records: Sequence[Dict[str, Any]], output: str,
         title: Optional[str] = None) -> None:
    """Draws the four panels of `records` into `output`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MetricsError("drawing needs matplotlib: pip install "
                           "matplotlib") from None
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    # The first step warms caches and allocations (the run's summary leaves
    # it out too).
    timed = records[1:] if len(records) > 1 else records
    panels = [
        (axes[0][0], records,
         [("loss", "training loss"), ("eval_loss", "eval loss")], "loss"),
        (axes[0][1], records, [("lr", "learning rate")], "learning rate"),
        (axes[1][0], records,
         [("grad_norm", "gradient norm (before clipping)")], "gradient norm"),
        (axes[1][1], timed, [("tokens_per_s", "tokens/s")],
         "tokens/s (after the first step)"),
    ]
    for axis, rows, lines, label in panels:
        drawn = 0
        for key, legend in lines:
            steps, values = _series(rows, key)
            if steps:
                marker = "o" if len(steps) < 30 else None
                axis.plot(steps, values, label=legend, marker=marker,
                          markersize=3)
                drawn += 1
        if drawn > 1:
            axis.legend()
        if not drawn:
            axis.text(0.5, 0.5, f"no {label} in this run", ha="center",
                      va="center", transform=axis.transAxes, color="gray")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
    for axis in axes[1]:
        axis.set_xlabel("step")
    skipped = [r["step"] for r in records if r.get("skipped")]
    for step in skipped:
        for row in axes:
            for axis in row:
                axis.axvline(step, color="red", alpha=0.3, linewidth=1)
    figure.suptitle(title or "training curves" +
                    (f" (red: {len(skipped)} skipped steps)" if skipped
                     else ""))
    figure.tight_layout()
    try:
        figure.savefig(output)
    except (OSError, ValueError) as error:
        raise MetricsError(f"cannot write '{output}': {error}") from None
    finally:
        plt.close(figure)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="trellis plot",
        description="Draws loss, eval loss, learning rate, gradient norm and "
                    "throughput against the step from `trellis run "
                    "--metrics FILE.jsonl`.")
    parser.add_argument("metrics", help="the metrics file (JSON Lines)")
    parser.add_argument("-o", "--output", default="curves.png",
                        help="the image to write; png, svg or pdf by its "
                             "extension (default curves.png)")
    parser.add_argument("--title", help="the figure's title")
    args = parser.parse_args(argv)
    try:
        plot(read_metrics(args.metrics), args.output, args.title)
    except MetricsError as error:
        print(f"trellis plot: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
