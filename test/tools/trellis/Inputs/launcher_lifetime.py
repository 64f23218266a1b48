"""Starts `trellis run PLAN --nproc 2` for a long run, waits for its first
step, then signals the launcher (kill: SIGKILL, term: SIGTERM, int:
SIGINT) and reports whether every rank is gone within 1 s, the launcher's
exit, its last error line, and whether its rendezvous directory is left
1 s later (removing it then).
Usage: launcher_lifetime.py TRELLIS PLAN kill|term|int"""
import glob
import os
import signal
import subprocess
import sys
import time

trellis, plan, mode = sys.argv[1:4]
launcher = subprocess.Popen(
    [trellis, "run", plan, "--nproc", "2", "--steps", "100000000"],
    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
launcher.stdout.readline()  # the first step's line: every rank is running


def children(parent):
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.split("/")[2]))
    return found


def alive(pid):
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


ranks = children(launcher.pid)


def rendezvous(pid):
    """The --rendezvous directory on a rank's command line."""
    arguments = open(f"/proc/{pid}/cmdline").read().split("\0")
    for argument in arguments:
        if argument.startswith("--rendezvous="):
            return argument.split("=", 1)[1]
    return None


# This launcher's directory alone: other tests' launchers make theirs at
# the same time.
store = rendezvous(ranks[0]) if ranks else None
sent = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}
launcher.send_signal(sent[mode])
_, errors = launcher.communicate()
deadline = time.monotonic() + 1.0
while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
    time.sleep(0.02)
print(f"{len(ranks)} ranks; all gone within 1 s: "
      f"{not any(alive(pid) for pid in ranks)}")
print(f"launcher exit {launcher.returncode}")
lines = [line for line in errors.splitlines() if line.strip()]
print(f"last error: {lines[-1] if lines else '(none)'}")
# The launcher removes it, or (SIGKILLed) its reaper does within 1 s.
deadline = time.monotonic() + 1.0
while store is not None and os.path.exists(store) and time.monotonic() < deadline:
    time.sleep(0.02)
left = store is not None and os.path.exists(store)
print(f"rendezvous directory left: {left}")
if left:
    subprocess.run(["rm", "-rf", store])
