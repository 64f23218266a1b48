"""Compiles a configuration twice, as `--emit estimate` (priced before
partitioning) and as a plan with --report-json, and compares: FLOPs,
parameter and optimizer bytes, and per collective and mesh axes the bytes
handed over and sent. Call counts are not compared: bucketing fuses
gradient reductions after partitioning. Prints `NAME: match` or each
difference, and exits 1 on one. Usage:
  compare_estimate.py TRELLIS DIR NAME CONFIG [compile flags...]"""

import json
import subprocess
import sys


def compile_json(trellis, args, *extra):
    subprocess.run([trellis, "compile", *args, *extra], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(trellis, directory, name, args):
    estimate_path = f"{directory}/{name}.estimate.json"
    report_path = f"{directory}/{name}.report.json"
    compile_json(trellis, args, "--emit", "estimate", "-o", estimate_path)
    compile_json(trellis, args, "--report-json", report_path, "-o", "/dev/null")
    with open(estimate_path) as f:
        estimates = json.load(f)["per_rank"]
    with open(report_path) as f:
        reports = json.load(f)["per_rank"]
    if len(reports) != len(estimates):
        sys.exit(f"{name}: the report has {len(reports)} rank kinds, the "
                 f"estimate {len(estimates)}")
    problems = []
    keys = 0
    for estimate, report in zip(estimates, reports):
        where = f"stage {report['stage']}" if len(reports) > 1 else "rank"
        problems += compare(where, estimate, report)
        keys += len(report["communication"])
    for problem in problems:
        print(f"{name}: {problem}")
    if problems:
        sys.exit(1)
    flops = sum(report["flops"] for report in reports)
    print(f"{name}: match ({len(reports)} rank kinds, {keys} collective "
          f"kinds, {flops:.0f} flops)")


def compare(where, estimate, report):
    problems = []
    if abs(estimate["flops"] - report["flops"]) > 1e-9 * max(report["flops"], 1):
        problems.append(f"{where} flops: estimate {estimate['flops']}, "
                        f"report {report['flops']}")
    for field in ("params", "optimizer"):
        if estimate["bytes"][field] != report["bytes"][field]:
            problems.append(f"{where} bytes.{field}: estimate "
                            f"{estimate['bytes'][field]}, report "
                            f"{report['bytes'][field]}")
    keys = set(estimate["communication"]) | set(report["communication"])
    for key in sorted(keys):
        mine = estimate["communication"].get(key, {})
        theirs = report["communication"].get(key, {})
        for field in ("bytes", "wire_bytes"):
            if mine.get(field, 0) != theirs.get(field, 0):
                problems.append(f"{where} {key} {field}: estimate "
                                f"{mine.get(field, 0)}, report "
                                f"{theirs.get(field, 0)}")
    return problems


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
