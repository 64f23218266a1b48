#!/usr/bin/env python3
"""The planner's predictions against measured CPU steps on this machine.

    python3 benchmarks/planner_cpu.py [ROUNDS] [STEPS] [--trellis BIN]
        [--clusters DIR] [--models gpt2-mini,gpt2-124m]

1. `trellis calibrate --threads 1 --ranks R` measures this machine into a
   cluster file for R = 1 and 2 ranks (DIR/cpu-R.json; --clusters reuses
   the files of an earlier run): a node running two ranks gives each less
   of its caches and memory bandwidth than one rank alone gets;
2. for each model and layout (1 rank; 2 ranks: dp, ZeRO 1-3, tp, tp with
   sp, pp with 1F1B and GPipe; recomputation), `trellis plan --evaluate`
   predicts its step on the file of its rank count and `trellis run
   --threads 1` measures
   it: ROUNDS interleaved rounds of STEPS steps, the first step of each
   run left out (kernels compile and caches fill), the median kept;
3. `trellis plan` picks a plan per rank count; its measured step is set
   against the fastest measured layout of that rank count.

Prints one table per model and the planner's picks. A benchmark: timings
depend on the machine and its load, nothing here fails on them.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (model, batch, seq): sizes whose steps take seconds on one core.
MODELS = {
    "gpt2-mini": ("examples/configs/gpt2-mini.json", 8, 256),
    "gpt2-124m": ("examples/configs/gpt2-124m.json", 4, 64),
}

# (ranks, --evaluate text): what the string leaves out the planner
# chooses (the micro-batch size where a pipeline needs several).
LAYOUTS = [
    (1, "micro-batch=MB,recompute=none"),
    (1, "micro-batch=MB,recompute=selective"),
    (1, "micro-batch=MB,recompute=full"),
    (2, "dp=2,zero=0,recompute=none"),
    (2, "dp=2,zero=1,recompute=none"),
    (2, "dp=2,zero=2,recompute=none"),
    (2, "dp=2,zero=3,recompute=none"),
    (2, "tp=2,no-sp,recompute=none"),
    (2, "tp=2,sp,recompute=none"),
    (2, "pp=2,schedule=1f1b,micro-batch=QB,recompute=none"),
    (2, "pp=2,schedule=gpipe,micro-batch=QB,recompute=none"),
]


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{result.stderr}")
    return result


def evaluate(trellis, config, cluster, ranks, batch, seq, plan, out):
    """The planner's prediction of `plan`: (step seconds, flags, plan), or
    None with the planner's refusal."""
    json_path = os.path.join(out, "evaluate.json")
    command = [trellis, "plan", config, "--cluster", cluster,
               "--gpus", str(ranks), "--global-batch", str(batch),
               "--seq", str(seq), "--precision", "fp32", "--top", "1",
               "--json", json_path]
    if plan:
        command += ["--evaluate", plan]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return None, result.stderr.strip().splitlines()[-1]
    with open(json_path) as f:
        best = json.load(f)["plans"][0]
    return (best["step_time_s"], best["flags"], best["plan"]), None


def measure(trellis, config, flags, ranks, steps, out):
    """Median measured step (seconds) of one run, its first step left out."""
    plan = os.path.join(out, "measured.plan")
    run([trellis, "compile", config, *flags.split(), "-o", plan])
    result = run([trellis, "run", plan, "--nproc", str(ranks), "--threads",
                  "1", "--steps", str(steps)])
    times = [float(m) / 1000 for m in
             re.findall(r"^step \d+ .*\| ([0-9.]+) ms", result.stdout, re.M)]
    if len(times) < 2:
        sys.exit(f"no step times in:\n{result.stdout}")
    return statistics.median(times[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("steps", type=int, nargs="?", default=4)
    parser.add_argument("--trellis", default=os.path.join(ROOT, "build", "bin",
                                                          "trellis"))
    parser.add_argument("--clusters",
                        help="a directory holding cpu-1.json and cpu-2.json "
                             "(default: measure them)")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="trellis-planner-cpu-")
    clusters = {}
    for ranks in (1, 2):
        clusters[ranks] = os.path.join(args.clusters or out,
                                       f"cpu-{ranks}.json")
        if not args.clusters:
            run([args.trellis, "calibrate", "--threads", "1", "--ranks",
                 str(ranks), "-o", clusters[ranks]])
    print(f"clusters: {clusters[1]}, {clusters[2]}")

    for name in args.models.split(","):
        path, batch, seq = MODELS[name]
        config = os.path.join(ROOT, path)
        rows, refused = [], []
        for ranks, text in LAYOUTS:
            text = text.replace("MB", str(batch)).replace("QB",
                                                          str(batch // 4))
            prediction, why = evaluate(args.trellis, config, clusters[ranks],
                                       ranks, batch, seq, text, out)
            if not prediction:
                refused.append(f"{ranks} rank(s), {text}: {why}")
                continue
            predicted, flags, plan = prediction
            rows.append({"ranks": ranks, "plan": plan, "flags": flags,
                         "predicted": predicted, "measured": []})
        picks = {}
        for ranks in (1, 2):
            prediction, why = evaluate(args.trellis, config, clusters[ranks],
                                       ranks, batch, seq, None, out)
            if not prediction:
                sys.exit(f"trellis plan on {ranks} rank(s): {why}")
            predicted, flags, plan = prediction
            picks[ranks] = plan
            if not any(r["plan"] == plan for r in rows):
                rows.append({"ranks": ranks, "plan": plan, "flags": flags,
                             "predicted": predicted, "measured": []})
        for _ in range(args.rounds):
            for row in rows:
                row["measured"].append(measure(args.trellis, config,
                                               row["flags"], row["ranks"],
                                               args.steps, out))
        print(f"\n{name}: batch {batch} x {seq} tokens, fp32, 1 thread per "
              f"rank, medians of {args.rounds} interleaved runs of "
              f"{args.steps} steps\n")
        print("| ranks | plan | measured | predicted | error |")
        print("|---:|---|---:|---:|---:|")
        errors = []
        for row in rows:
            measured = statistics.median(row["measured"])
            row["median"] = measured
            error = row["predicted"] / measured - 1
            errors.append(abs(error))
            print(f"| {row['ranks']} | {row['plan']} | {measured:.3f} s | "
                  f"{row['predicted']:.3f} s | {error:+.1%} |")
        print(f"\nlargest error {max(errors):.1%}, median "
              f"{statistics.median(errors):.1%}")
        for line in refused:
            print(f"refused by the planner: {line}")
        for ranks, plan in picks.items():
            candidates = [r for r in rows if r["ranks"] == ranks]
            fastest = min(candidates, key=lambda r: r["median"])
            pick = next(r for r in candidates if r["plan"] == plan)
            print(f"planner's pick on {ranks} rank(s): {plan}: "
                  f"{pick['median']:.3f} s measured; fastest measured "
                  f"{fastest['plan']}: {fastest['median']:.3f} s "
                  f"({pick['median'] / fastest['median'] - 1:+.1%})")


if __name__ == "__main__":
    main()
