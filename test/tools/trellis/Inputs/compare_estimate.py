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
        estimate = json.load(f)["per_rank"][0]
    with open(report_path) as f:
        reports = json.load(f)["per_rank"]
    if len(reports) != 1:
        sys.exit(f"expected one rank kind in the report, found {len(reports)}")
    report = reports[0]
    problems = []
    if abs(estimate["flops"] - report["flops"]) > 1e-9 * max(report["flops"], 1):
        problems.append(f"flops: estimate {estimate['flops']}, "
                        f"report {report['flops']}")
    for field in ("params", "optimizer"):
        if estimate["bytes"][field] != report["bytes"][field]:
            problems.append(f"bytes.{field}: estimate "
                            f"{estimate['bytes'][field]}, report "
                            f"{report['bytes'][field]}")
    keys = set(estimate["communication"]) | set(report["communication"])
    for key in sorted(keys):
        mine = estimate["communication"].get(key, {})
        theirs = report["communication"].get(key, {})
        for field in ("bytes", "wire_bytes"):
            if mine.get(field, 0) != theirs.get(field, 0):
                problems.append(f"{key} {field}: estimate {mine.get(field, 0)}, "
                                f"report {theirs.get(field, 0)}")
    for problem in problems:
        print(f"{name}: {problem}")
    if problems:
        sys.exit(1)
    print(f"{name}: match ({len(keys)} collective kinds, "
          f"{report['flops']:.0f} flops)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
