"""Ranks started by torchrun (the test environment's torch): `torchrun
--no-python trellis run PLAN` joins one job, rank 0 serving the store,
whose losses equal trellis run's own launcher's."""

import os
import re
import subprocess
import sys

import pytest

TOKEN = "0123456789abcdef0123456789abcdef"


def losses(output: str) -> list:
    return [float(m) for m in re.findall(r"^step \d+ \| loss ([0-9.]+)",
                                         output, re.M)]


@pytest.mark.parametrize("mesh", [["--dp", "2"], ["--pp", "2",
                                                  "--microbatches", "2"]])
def test_torchrun_starts_the_ranks_of_a_plan(tmp_path, trellis_bin: str,
                                             gpt2_tiny: str,
                                             mesh: list) -> None:
    pytest.importorskip("torch.distributed.run")
    plan = str(tmp_path / "two.plan")
    subprocess.run([trellis_bin, "compile", gpt2_tiny, *mesh, "-o", plan],
                   check=True)
    own = subprocess.run([trellis_bin, "run", plan, "--nproc", "2",
                          "--steps", "3"], check=True, capture_output=True,
                         text=True).stdout
    environment = dict(os.environ, TRELLIS_JOB_TOKEN=TOKEN)
    started = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", "2", "--no-python", trellis_bin, "run", plan,
         "--steps", "3"],
        env=environment, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr
    expected = losses(own)
    assert len(expected) == 3
    # Rank 0 alone prints the steps.
    assert losses(started.stdout) == expected


def test_torchrun_without_the_jobs_secret_is_refused(tmp_path,
                                                     trellis_bin: str,
                                                     gpt2_tiny: str) -> None:
    pytest.importorskip("torch.distributed.run")
    plan = str(tmp_path / "dp2.plan")
    subprocess.run([trellis_bin, "compile", gpt2_tiny, "--dp", "2", "-o",
                    plan], check=True)
    environment = {k: v for k, v in os.environ.items()
                   if k != "TRELLIS_JOB_TOKEN"}
    started = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", "2", "--no-python", trellis_bin, "run", plan],
        env=environment, capture_output=True, text=True, timeout=300)
    assert started.returncode != 0
    assert ("trellis run: error: started by torchrun: the ranks need the "
            "job's secret") in started.stderr
