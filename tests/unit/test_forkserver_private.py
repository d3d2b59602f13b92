"""multiprocessing's private names that `runner.execute.forkserver_private` uses, checked on the running Python.

A Python that renames one, changes how it is called, or edits the `popen_forkserver.Popen._launch`
the module copies fails here, not as a job whose fork server hangs or dies. The copy uses what the
stdlib's `_launch` uses (`self._fds`, `connect_to_new_process`, `read_signed`, ...), so while that
method's source is the one recorded for this version, what it relies on is there too.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import operator
import sys
from multiprocessing import forkserver, popen_forkserver

import pytest

# each name the module calls (under multiprocessing.) and its signature on every recorded Python
SIGNATURES = {
    "forkserver.set_forkserver_preload": "(modules_names)",
    "forkserver.ensure_running": "()",
    "forkserver.connect_to_new_process": "(fds)",
    "forkserver.read_signed": "(fd)",
    "popen_forkserver.Popen._launch": "(self, process_obj)",
    "context.ForkServerProcess._Popen": "(process_obj)",
    "context.set_spawning_popen": "(popen)",
    "spawn.get_preparation_data": "(name)",
    "reduction.dump": "(obj, file, protocol=None)",
    "util.Finalize": "(obj, callback, args=(), kwargs=None, exitpriority=None)",
    "util.close_fds": "(*fds)",
}
# sha256 of inspect.getsource(popen_forkserver.Popen._launch), the method WholeRequestPopen._launch copies
# (with stops held around the request), per Python minor version; read with CPython 3.11.7, 3.12.1, 3.13.0
LAUNCH_SHA256 = {
    (3, 11): "214844899bd3407f72082111e993b40f7c271620be27195b878ea1e44a5f3837",
    (3, 12): "214844899bd3407f72082111e993b40f7c271620be27195b878ea1e44a5f3837",
    (3, 13): "214844899bd3407f72082111e993b40f7c271620be27195b878ea1e44a5f3837",
}


@pytest.mark.parametrize(("name", "signature"), SIGNATURES.items())
def test_each_private_name_the_module_calls_has_the_signature_it_calls_it_with(name: str, signature: str) -> None:
    module, _, attribute = name.partition(".")
    found = operator.attrgetter(attribute)(importlib.import_module(f"multiprocessing.{module}"))
    assert str(inspect.signature(found)) == signature


def test_the_fork_server_has_the_private_attributes_the_module_reads_and_closes() -> None:
    assert isinstance(forkserver._forkserver, forkserver.ForkServer)
    assert {"_forkserver_pid", "_forkserver_alive_fd"} <= vars(forkserver.ForkServer()).keys()
    # a forked child gets its end of the "alive" pipe here, the end let_go_of_the_fork_server closes
    assert "_forkserver._forkserver_alive_fd" in inspect.getsource(forkserver._serve_one)  # type: ignore[attr-defined]


def test_the_copied_launch_follows_this_pythons_launch() -> None:
    version = sys.version_info[:2]
    if version not in LAUNCH_SHA256:
        pytest.skip(
            f"no hash of popen_forkserver.Popen._launch recorded for Python {version[0]}.{version[1]}: compare "
            "its source with WholeRequestPopen._launch in runner/execute/forkserver_private.py, then record it "
            "in LAUNCH_SHA256"
        )
    source = inspect.getsource(popen_forkserver.Popen._launch)  # type: ignore[attr-defined]
    assert hashlib.sha256(source.encode()).hexdigest() == LAUNCH_SHA256[version], (
        f"Python {version[0]}.{version[1]}'s popen_forkserver.Popen._launch is not the one "
        "WholeRequestPopen._launch copies: carry its change into the copy, then record its hash"
    )
