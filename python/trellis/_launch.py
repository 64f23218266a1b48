"""trellis.launch: a plan's ranks as processes, from one Python call.

Each rank is a fresh interpreter (`python -m trellis._rank JOB RANK`), so
nothing of the caller's threads or state is copied into it. It reads the
job (plan text, session options, the function or the batches) from a
pickle, opens its Session, and writes its result (or its error) next to
the job; the caller waits for all, or for the first failure.
"""

import os
import pickle
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ._trellis import Error

# Set in the ranks: launch() there is a script re-run without its
# `if __name__ == "__main__":` guard.
_WORKER_VARIABLE = "TRELLIS_LAUNCH_RANK"

# After a rank fails, how long the others have to report theirs.
_PEER_GRACE_SECONDS = 2.0


def _train_on(session: Any, batches: Sequence[Tuple[Any, Any]]) -> List[float]:
    return [session.step(tokens, targets) for tokens, targets in batches]


def _run_rank(directory: str, rank: int) -> None:
    """A rank's body (in its own interpreter)."""
    result_path = os.path.join(directory, f"result-{rank}.pickle")
    try:
        with open(os.path.join(directory, "job.pickle"), "rb") as file:
            header = pickle.load(file)
            # A function of the caller's script: its module, re-run as
            # multiprocessing does (under a name that skips its guard).
            if header["main_path"]:
                sys.modules["__main__"] = sys.modules["__mp_main__"] = (
                    _as_module(runpy.run_path(header["main_path"],
                                              run_name="__mp_main__")))
            job = pickle.load(file)
        import trellis
        plan = trellis.Plan(job["plan"])
        rendezvous = job["rendezvous"]
        with trellis.Session(plan, rank if rendezvous else None,
                             rendezvous=rendezvous, **job["options"]) as session:
            fn = job["fn"]
            try:
                value = (fn(session, *job["args"]) if fn else
                         _train_on(session, job["batches"]))
                outcome: Tuple[str, Any, float] = ("ok", value, time.time())
            except BaseException as error:
                # Timed before the session closes: closing fails the peers.
                outcome = _failure(error)
    except BaseException as error:  # every failure goes back to the caller
        outcome = _failure(error)
    partial = result_path + ".partial"
    with open(partial, "wb") as file:
        pickle.dump(outcome, file)
    os.replace(partial, result_path)


def _failure(error: BaseException) -> Tuple[str, str, float]:
    message = str(error) if type(error).__name__ == "Error" else (
        f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
    return ("error", message, time.time())


class _Namespace:
    pass


def _as_module(namespace: dict) -> Any:
    module = _Namespace()
    module.__dict__.update(namespace)
    return module


def launch(plan: Any, nproc: Optional[int] = None,
           fn: Optional[Callable[..., Any]] = None, args: tuple = (), *,
           batches: Optional[Sequence[Tuple[Any, Any]]] = None,
           rendezvous: Optional[str] = None, **options: Any) -> List[Any]:
    """Runs the plan's ranks as `nproc` processes on this machine, each with
    a trellis.Session meeting the others in a rendezvous directory. Each
    rank calls `fn(session, *args)` (a module-level function: of a module,
    or of the calling script when it guards its launch with `if __name__ ==
    "__main__":`), or, without `fn`, steps through `batches` ((tokens,
    targets) pairs, the global batch) and returns the losses. Returns each
    rank's result in rank order; a rank that fails or dies raises
    trellis.Error naming it, and the others are stopped. `options` are
    Session's (threads, seed, timeout, weights, load...)."""
    from . import Plan
    if os.environ.get(_WORKER_VARIABLE) is not None:
        raise Error("launch: called in a rank while it imports the calling "
                    "script: put the script's launch under "
                    "`if __name__ == \"__main__\":`")
    if not isinstance(plan, Plan):
        plan = Plan.load(plan)
    ranks = plan.num_ranks
    nproc = ranks if nproc is None else nproc
    if nproc != ranks:
        raise Error(f"launch: the plan's mesh {plan.mesh} has {ranks} ranks: "
                    f"expected nproc={ranks}, found {nproc}")
    if (fn is None) == (batches is None):
        raise Error("launch: expected fn (called with each rank's session) or "
                    "batches (trained on), and not both")
    main_path = None
    if fn is not None and getattr(fn, "__module__", None) == "__main__":
        main_path = getattr(sys.modules["__main__"], "__file__", None)
        if main_path is None:
            raise Error("launch: fn is defined in an interactive session; "
                        "define it in a module or a script")
    directory = tempfile.mkdtemp(prefix="trellis-launch-")
    meeting = rendezvous
    if ranks > 1 and meeting is None:
        meeting = os.path.join(directory, "rendezvous")
        os.mkdir(meeting)
    processes: List[subprocess.Popen] = []
    try:
        with open(os.path.join(directory, "job.pickle"), "wb") as file:
            pickle.dump({"main_path": main_path}, file)
            try:
                pickle.dump({"plan": plan.text, "options": options,
                             "rendezvous": meeting if ranks > 1 else None,
                             "fn": fn, "args": tuple(args),
                             "batches": batches}, file)
            except (pickle.PicklingError, AttributeError, TypeError) as error:
                raise Error(f"launch: cannot send the job to the ranks: "
                            f"{error} (fn must be a module-level function, "
                            "args and batches picklable)") from None
        environment = dict(os.environ)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(
            __file__)))
        environment["PYTHONPATH"] = os.pathsep.join(
            [package_root] + sys.path[1:] +
            ([environment["PYTHONPATH"]] if "PYTHONPATH" in environment else []))
        for rank in range(ranks):
            environment[_WORKER_VARIABLE] = str(rank)
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "trellis._rank", directory, str(rank)],
                env=dict(environment)))
        values: List[Any] = [None] * ranks
        pending = set(range(ranks))
        # (when, rank, message): a rank's failure fails its peers' collectives
        # soon after, so the earliest is the cause.
        failures: List[Tuple[float, int, str]] = []
        # When each rank was last seen running: a rank that dies without a
        # result died after it, and before any failure its death caused in
        # its peers (which they time themselves, before this loop notices
        # the death).
        last_alive = [time.time()] * ranks
        deadline = None
        while pending and (deadline is None or time.time() < deadline):
            for rank in sorted(pending):
                checked = time.time()
                code = processes[rank].poll()
                if code is None:
                    last_alive[rank] = checked
                    continue
                pending.discard(rank)
                result_path = os.path.join(directory, f"result-{rank}.pickle")
                if not os.path.exists(result_path):
                    how = (f"was killed by signal {-code}" if code < 0 else
                           f"exited with code {code}")
                    failures.append((last_alive[rank], rank,
                                     f"{how} before returning a result"))
                    continue
                with open(result_path, "rb") as file:
                    status, value, when = pickle.load(file)
                if status == "ok":
                    values[rank] = value
                else:
                    failures.append((when, rank, value))
            if failures and deadline is None:
                deadline = time.time() + _PEER_GRACE_SECONDS
            time.sleep(0.02)
        if failures:
            when, rank, message = min(failures)
            others = sorted(r for _, r, _ in failures if r != rank)
            also = (f" (then rank{'s' if len(others) > 1 else ''} "
                    f"{', '.join(map(str, others))} failed too)"
                    if others else "")
            raise Error(f"rank {rank}: {message}{also}")
        return values
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(directory, ignore_errors=True)

