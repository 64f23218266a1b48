"""Runs a plan under a range of address-space limits (ulimit -v).

Usage: address_space_sweep.py TRELLIS_RUN PLAN FIRST_KB LAST_KB STEP_KB

Each run must end with exit code 0 or 1 (an error it names), never by a
signal (an abort from an uncaught std::bad_alloc). Prints "no limit
aborted", or each limit that did with its signal and last error line.
"""

import resource
import subprocess
import sys


def main() -> int:
    run, plan = sys.argv[1:3]
    first, last, step = (int(v) for v in sys.argv[3:6])
    aborted = []
    for limit in range(first, last + 1, step):
        def restrict(kb=limit):
            resource.setrlimit(resource.RLIMIT_AS, (kb * 1024, kb * 1024))
        done = subprocess.run([run, plan, "--steps", "1"],
                              preexec_fn=restrict, capture_output=True,
                              text=True, timeout=300)
        if done.returncode not in (0, 1):
            lines = done.stderr.strip().splitlines()
            aborted.append(f"{limit} KB: exit {done.returncode}: "
                           f"{lines[-1] if lines else ''}")
    print("\n".join(aborted) if aborted else "no limit aborted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
