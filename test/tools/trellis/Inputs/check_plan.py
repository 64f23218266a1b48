"""Runs `trellis plan ... --json FILE`, then compiles each plan it shows
with its flags and --report-json, and checks that the plan's memory per
stage is the report's `total_peak`, byte for byte. Prints `NAME: N plans
compile, memory equals the report` or each difference, and exits 1 on one.
Usage: check_plan.py TRELLIS DIR NAME MODEL [plan flags...]"""

import json
import shlex
import subprocess
import sys


def main(trellis, directory, name, model, args):
    plans_path = f"{directory}/{name}.plans.json"
    subprocess.run([trellis, "plan", model, *args, "--json", plans_path],
                   check=True, stdout=subprocess.DEVNULL)
    with open(plans_path) as f:
        plans = json.load(f)["plans"]
    failures = []
    for index, plan in enumerate(plans):
        report_path = f"{directory}/{name}.{index}.report.json"
        subprocess.run([trellis, "compile", model,
                        *shlex.split(plan["flags"]), "--report-json",
                        report_path, "-o", "/dev/null"],
                       check=True, stderr=subprocess.DEVNULL)
        with open(report_path) as f:
            report = [rank["bytes"]["total_peak"]
                      for rank in json.load(f)["per_rank"]]
        if plan["memory_from"] != "report" or plan["peak_bytes"] != report:
            failures.append(f"{plan['plan']}: planned {plan['peak_bytes']} "
                            f"({plan['memory_from']}), report {report}")
    for failure in failures:
        print(f"{name}: {failure}")
    if failures:
        sys.exit(1)
    print(f"{name}: {len(plans)} plans compile, memory equals the report")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
