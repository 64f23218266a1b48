"""Truncates a run's token file while the run reads it.

Usage: truncate_during_run.py TRELLIS PLAN DATA SAVE

Starts `TRELLIS run PLAN --data DATA --save SAVE` for many steps, waits
until it reports step 3, truncates DATA to 4 bytes, and waits for the run
to end (at most 120 s). Prints the exit code (or the signal that killed the
run), the run's error lines and the step of the checkpoint saved in SAVE.
"""

import json
import os
import subprocess
import sys


def main() -> int:
    trellis, plan, data, save = sys.argv[1:5]
    run = subprocess.Popen(
        [trellis, "run", plan, "--data", data, "--save", save, "--steps",
         "100000", "--seed", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in run.stdout:
        if line.startswith("step 3 "):
            with open(data, "r+b") as f:
                f.truncate(4)
            break
    try:
        _, errors = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        print("the run did not end within 120 s")
        return 1
    code = run.returncode
    print(f"exit {code}" if code >= 0 else f"killed by signal {-code}")
    for line in errors.splitlines():
        if "error" in line:
            print(line)
    manifest = os.path.join(save, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            print("saved step", json.load(f)["step"])
    else:
        print("nothing saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
