"""A rank of trellis.launch: `python -m trellis._rank JOB_DIRECTORY RANK`."""

import sys

from trellis._launch import _run_rank

if __name__ == "__main__":
    _run_rank(sys.argv[1], int(sys.argv[2]))
