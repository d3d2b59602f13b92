"""Every use of multiprocessing's private fork-server API, in one module that a unit test checks on each Python.

What the runner needs of the fork server has no public API: starting it with chosen preloads, its
pid (to end it with the job), a forked child closing its copy of the server's "alive" pipe (so the
server ends with the job), and a request sent with stops held (a copy of `popen_forkserver.Popen._launch`).
Read against CPython 3.11.7, 3.12.1 and 3.13.0 (`Lib/multiprocessing/`), the names used are:

- `forkserver._forkserver`, the process's `ForkServer`, and its `_forkserver_pid` and
  `_forkserver_alive_fd` (the latter set in a forked child by `forkserver._serve_one`);
- `forkserver.set_forkserver_preload`, `ensure_running`, `connect_to_new_process` and `read_signed`;
- `popen_forkserver.Popen`, its `_launch` (copied below) and `_fds`; `context.ForkServerProcess` and its
  `_Popen`; `context.set_spawning_popen`, `spawn.get_preparation_data`, `reduction.dump`,
  `util.Finalize` and `util.close_fds`.

`tests/unit/test_forkserver_private.py` checks each signature, and the hash of the stdlib's `_launch`
per Python version, so a Python that changes one fails in the unit suite, not in a job.
"""

from __future__ import annotations

import io
import os
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from multiprocessing.process import BaseProcess

from runner.signals import signals_held


def ensure_fork_server(preload: list[str]) -> None:
    """Start this process's fork server, importing `preload`, unless it runs already."""
    forkserver.set_forkserver_preload(preload)  # read when the server starts
    forkserver.ensure_running()


def fork_server_pid() -> int | None:
    """The pid of the fork server this process started; None before it starts one."""
    pid: int | None = getattr(forkserver._forkserver, "_forkserver_pid", None)
    return pid


def let_go_of_the_fork_server() -> None:
    """In a forked child: close its copy of the "alive" pipe, so the fork server (its parent) ends with the job."""
    server = forkserver._forkserver
    alive = getattr(server, "_forkserver_alive_fd", None)  # set in a forked child only
    if alive is not None:
        os.close(alive)
        setattr(server, "_forkserver_alive_fd", None)  # noqa: B010  (a private attribute typeshed lacks)


class _WholeRequestPopen(popen_forkserver.Popen):
    """Asks the fork server for a child with stops held from the connect to the last byte of the child's data.

    A stop in between left the server an empty request (Python 3.11's server dies of it, with a
    traceback) or the forked child no data (it prints one). The wait for the fork, which can last
    the server's preloads, stays open to a stop. The steps are `popen_forkserver.Popen._launch`'s.
    """

    def _launch(self, process_obj: BaseProcess) -> None:
        data = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(spawn.get_preparation_data(process_obj.name), data)
            reduction.dump(process_obj, data)
        finally:
            set_spawning_popen(None)
        with signals_held():
            # _fds and close_fds are the stdlib's, which its stubs lack
            self.sentinel, write_end = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
            parent_alive = os.dup(write_end)  # the child's sign that this process lives
            close = util.close_fds  # type: ignore[attr-defined]
            self.finalizer = util.Finalize(self, close, (parent_alive, self.sentinel))
            with open(write_end, "wb", closefd=True) as pipe:
                pipe.write(data.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class WholeRequestProcess(ForkServerProcess):
    """A process forked from the fork server, its request sent whole (`_WholeRequestPopen`)."""

    @staticmethod
    def _Popen(process_obj: BaseProcess) -> popen_forkserver.Popen:
        return _WholeRequestPopen(process_obj)
