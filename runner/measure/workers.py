"""Steady state in fresh worker processes (`measure.processes`), one after another, pyperf-style.

A process carries state from what ran before (heap and page-fault mode, thread pools, the
CPU calibration's buffers, the profiler's initialisation); a median that depends on that
state moves from run to run. Each worker builds the workload from the same config and seed,
makes its first call, warms up and times its steps, on the same device and cores as the
job; the job keeps the per-process medians.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import traceback
from multiprocessing.connection import Connection

from runner.backends import make_backend
from runner.config import RunSpec
from runner.measure.build import build_workload
from runner.measure.host_memory import children_keep_freed_memory

log = logging.getLogger(__name__)


class WorkerFailed(RuntimeError):
    """A worker process raised or died; the message says which and how."""


def _worker(spec: RunSpec, results: Connection) -> None:
    # the job stops its workers itself: a Ctrl-C reaching the whole process group must not
    # print a worker's traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from runner.measure.phases import steady_state, timed_step

        backend = make_backend(spec.backend)
        workload = build_workload(spec.workload, backend)
        timed_step(workload, backend)  # its first call: compilation, caches
        results.send(("ok", steady_state(workload, backend, spec)))
    except Exception:  # anything: the job reports it, this process only carries it over
        results.send(("error", traceback.format_exc()))


def _one_worker(spec: RunSpec, number: int) -> list[list[float]]:
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_worker, args=(spec, send), name=f"steady-state-{number}", daemon=True)
    with children_keep_freed_memory(spec.measure.keep_freed_memory):
        process.start()
    send.close()
    try:
        kind, payload = receive.recv()
    except EOFError:
        process.join()
        raise WorkerFailed(f"steady-state worker {number} died (exit code {process.exitcode})") from None
    finally:
        if process.is_alive():  # a stop, or an error in the pipe: never leave a worker behind
            process.terminate()
        process.join()
    if kind == "error":
        raise WorkerFailed(f"steady-state worker {number} raised:\n{payload}")
    return payload  # type: ignore[no-any-return]


def steady_state_in_processes(spec: RunSpec, count: int) -> list[list[list[float]]]:
    """Per worker process, its per-repeat step times in ms; workers run one at a time."""
    runs = []
    for number in range(1, count + 1):
        log.info("steady state: worker process %d/%d ...", number, count)
        runs.append(_one_worker(spec, number))
    return runs
