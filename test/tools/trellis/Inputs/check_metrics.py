"""Checks a `trellis run --metrics` file against the run's printed step
lines: one record per step, in order, with the printed loss (and grad norm
and rate where printed), and the fields named on the command line present.
Prints `N records: fields ...` or exits 1 naming the first difference.
Usage: check_metrics.py RUN_OUTPUT METRICS.jsonl [FIELD...]"""

import json
import re
import sys


def main(output_path, metrics_path, fields):
    with open(output_path) as f:
        printed = {int(m.group(1)): m.group(0) for m in
                   re.finditer(r"^step (\d+) \|.*$", f.read(), re.M)}
    with open(metrics_path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    steps = [r["step"] for r in records]
    if steps != sorted(printed):
        sys.exit(f"expected records of steps {sorted(printed)}, found {steps}")
    for record in records:
        line = printed[record["step"]]
        for key, pattern in (("loss", r"\| loss ([0-9.eE+-]+)"),
                             ("grad_norm", r"\| grad norm ([0-9.eE+-]+)"),
                             ("lr", r"\| lr ([0-9.eE+-]+)")):
            match = re.search(pattern, line)
            if not match:
                continue
            value = float(match.group(1))
            if abs(record[key] - value) > 1e-5 * max(abs(value), 1e-12):
                sys.exit(f"step {record['step']}: {key} {record[key]} in "
                         f"the metrics, {value} printed")
        for field in fields:
            if field not in record:
                sys.exit(f"step {record['step']}: expected field "
                         f"{field!r}, found {sorted(record)}")
    print(f"{len(records)} records: fields {' '.join(sorted(records[0]))}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
