"""The `torch.neuron` device module of the stand-in, with the runtime's core reservation."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from torch_neuronx import memory  # noqa: F401  (torch.neuron.memory, the module)
from torch_neuronx._record import deviates, record

VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
# the implicit async mode's variable: Neuron SDK 2.31 and later only warn about it
INFLIGHT_ENV = "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS"
STATE_ENV = "NEURON_STANDIN_STATE"
# physical NeuronCores per logical one, 1 or 2 (logical-neuroncore-config.rst)
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"

_runtime_started = False
_owned: list[int] = []  # absolute indices of the cores this process's runtime reserved
_claims: list[Path] = []  # their claim files, released at exit
_device_count: int | None = None
_in_bad_fork = False  # forked from a process whose runtime had started (SRC's _after_fork)


def total_cores() -> int:
    """The logical NeuronCores: NEURON_STANDIN_CORES at Trn2's default LNC of 2, twice as many at LNC=1.

    The LNC is the variable's, else the host's (NEURON_STANDIN_HOST_LNC, as /opt/aws/neuron/logical_nc_config
    sets it; 2 by default). Deviation "lnc_ignored": a runtime whose logical cores do not follow the variable.
    """
    lnc = os.environ.get(LNC_ENV) or os.environ.get("NEURON_STANDIN_HOST_LNC") or "2"
    lnc_1 = lnc == "1" and not deviates("lnc_ignored")
    return int(os.environ.get("NEURON_STANDIN_CORES", "8")) * (2 if lnc_1 else 1)


def _fail(message: str) -> RuntimeError:
    return RuntimeError(f"NRT: nrt_init failed: {message}")


def _listed_cores(spec: str) -> list[int]:
    """Every core a NEURON_RT_VISIBLE_CORES value lists (no contiguity check); ValueError if malformed."""
    cores: list[int] = []
    for part in spec.split(","):
        low, dash, high = part.strip().partition("-")
        first, last = int(low), int(high) if dash else int(low)
        if first < 0 or last < first:
            raise ValueError(part)
        cores.extend(range(first, last + 1))
    return cores


def visible_cores(spec: str | None) -> list[int]:
    """The cores the runtime would own: NEURON_RT_VISIBLE_CORES checked as NRT does, or all of them."""
    if not spec:
        return list(range(total_cores()))
    try:
        cores = sorted(set(_listed_cores(spec)))
    except ValueError:
        raise _fail(f"{VISIBLE_CORES_ENV}={spec!r} is not a core index, range (2-5) or comma list") from None
    if cores != list(range(cores[0], cores[-1] + 1)) and not deviates("any_core_list"):
        raise _fail(
            f"{VISIBLE_CORES_ENV}={spec!r} is not contiguous: it must be a single core, a range (2-5) "
            "or a comma list, and the resulting range must be contiguous (3,4,5 is valid; 3,5,6 and 0,2-3 are not)"
        )
    if cores[-1] >= total_cores():
        raise _fail(
            f"{VISIBLE_CORES_ENV}={spec!r} names NeuronCore {cores[-1]}, "
            f"but this instance has {total_cores()} (0-{total_cores() - 1})"
        )
    return cores


def state_dir() -> Path:
    """Where claims live: $NEURON_STANDIN_STATE, else a per-user folder in the temp directory."""
    configured = os.environ.get(STATE_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"neuron_standin_{os.getuid()}"


# deviation "neff_cache_at_import": where a build reading TORCH_NEURONX_NEFF_CACHE_DIR at import
# compiles its NEFFs (unset: a folder beside the claims, not the real default /tmp/neff_cache)
NEFF_CACHE_AT_IMPORT = Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or state_dir() / "neff_cache")


def compile_graph(digest: str, neff_cache: Path) -> Path:
    """Compile one graph as TorchNeuron does, its caches first: its NEFF, served warm when a cache holds it.

    Its HLO cache ($TORCH_NEURONX_HLO_CACHE_DIR; unset, `<state>/hlo_cache`: the real default is
    unknown) and local NEFF cache ($TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR, lock files; unset,
    `<state>/local_cache` for SRC's /tmp/local_cache) are read at each compile, as the NEFF cache.
    """
    neff = neff_cache / f"neff_{digest}.neff"
    hlo = Path(os.environ.get("TORCH_NEURONX_HLO_CACHE_DIR") or state_dir() / "hlo_cache") / f"{digest}.entry"
    local = Path(os.environ.get("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR") or state_dir() / "local_cache")
    served = "neff_cache" if neff.exists() else "hlo_cache" if hlo.exists() else None
    if served is None:  # neuronx-cc runs, under the local cache's lock, and both caches keep its NEFF
        local.mkdir(parents=True, exist_ok=True)
        (local / f"{digest}.lock").touch()
        hlo.parent.mkdir(parents=True, exist_ok=True)
        hlo.write_bytes(b"NEFF" * 128)
    neff_cache.mkdir(parents=True, exist_ok=True)
    if not neff.exists():
        shutil.copy(hlo, neff)
    record("compile", graph=digest, served=served)
    return neff


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    """Serialise claims and takeovers between processes sharing a state directory."""
    state.mkdir(parents=True, exist_ok=True)
    with open(state / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _owner(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child nobody has reaped yet still answers signal 0
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _claim(state: Path, cores: list[int]) -> list[Path]:
    """Reserve every core (one O_EXCL file each holding our pid); all or none."""
    claimed: list[Path] = []
    try:
        for nc in cores:
            path = state / f"nc_{nc}.owner"
            while True:
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    owner = _owner(path)
                    if owner is not None and owner != os.getpid() and _alive(owner):
                        raise _fail(
                            f"NeuronCore {nc} is in use by process {owner} (reserved by the process that started "
                            f"the runtime; pin each process to its own cores with {VISIBLE_CORES_ENV})"
                        ) from None
                    path.unlink(missing_ok=True)  # a dead process's claim (or our own): take it over
                    continue
                with os.fdopen(fd, "w") as f:
                    f.write(f"{os.getpid()}\n")
                claimed.append(path)
                break
    except BaseException:
        _unlink_own(claimed)
        raise
    return claimed


def _unlink_own(paths: list[Path]) -> None:
    for path in paths:
        if _owner(path) == os.getpid():  # a forked child must not release its parent's cores
            path.unlink(missing_ok=True)


def _release_claims() -> None:
    """At exit: give the cores back (skipped if the state directory is gone already)."""
    if _claims and _claims[0].parent.is_dir():
        with contextlib.suppress(OSError), _locked(_claims[0].parent):
            _unlink_own(_claims)
    _claims.clear()


def _after_fork_in_child() -> None:
    """A child forked after the runtime started has none of its own, and may not start one (SRC's _after_fork)."""
    global _runtime_started, _in_bad_fork
    if _runtime_started:
        _in_bad_fork, _runtime_started = True, False
        _owned.clear()
        _claims.clear()  # the parent's to release


os.register_at_fork(after_in_child=_after_fork_in_child)


def start_runtime() -> None:
    """NRT starts on first device use: it reads NEURON_RT_VISIBLE_CORES and reserves those cores."""
    global _runtime_started
    if _runtime_started:
        return
    if _in_bad_fork:
        raise RuntimeError(
            "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with multiprocessing, "
            "you must use the 'spawn' start method"
        )
    visible = os.environ.get(VISIBLE_CORES_ENV)
    try:
        if os.environ.get(LNC_ENV, "2") not in ("1", "2"):  # "LNC can only be set to 1 or 2"
            raise _fail(f"{LNC_ENV}={os.environ[LNC_ENV]!r}: LNC can only be set to 1 or 2")
        cores = visible_cores(visible)
        state = state_dir()
        with _locked(state):
            claimed = _claim(state, cores[:1] if deviates("no_reservation") else cores)
    except RuntimeError as err:
        record("runtime_start_failed", visible_cores=visible, error=str(err))
        raise
    _claims.extend(claimed)
    _owned[:] = cores
    _runtime_started = True
    if INFLIGHT_ENV in os.environ:
        print(f"NRT: {INFLIGHT_ENV} is deprecated and no longer enables asynchronous execution", file=sys.stderr)
    atexit.register(_release_claims)
    record(
        "runtime_start",
        visible_cores=visible,
        cores=cores,
        async_nrt=os.environ.get("TORCH_NEURONX_ENABLE_ASYNC_NRT"),
        inflight_requests=os.environ.get(INFLIGHT_ENV),
    )


def owned_cores() -> list[int]:
    """Absolute indices of the cores this process reserved (empty before the runtime starts)."""
    return list(_owned)


def is_available() -> bool:
    if deviates("queries_start_runtime"):
        start_runtime()
    return total_cores() > 0


def device_count() -> int:
    """Like SRC's vnc_count(): computed once without starting the runtime, then cached."""
    global _device_count
    if deviates("queries_start_runtime"):
        start_runtime()
    if _device_count is None or deviates("count_not_cached"):
        visible = os.environ.get(VISIBLE_CORES_ENV)
        try:
            _device_count = len(set(_listed_cores(visible))) if visible else total_cores()
        except ValueError:
            _device_count = 0
    return _device_count


def current_device() -> int:
    return 0


def get_device_name(device: int | None = None) -> str:
    return f"neuron:{device or 0}"


# executions the runtime makes slow (deviation "slow_first_runs": NEFF loading past the warm-up)
SLOW_FIRST_RUNS, SLOW_RUN_S = 12, 0.02
_synchronized = 0


def synchronize(device: int | None = None) -> None:
    global _synchronized
    start_runtime()
    _synchronized += 1
    if deviates("slow_first_runs") and _synchronized <= SLOW_FIRST_RUNS:
        time.sleep(SLOW_RUN_S)
    record("synchronize")


def is_initialized() -> bool:
    return _runtime_started


def _is_in_bad_fork() -> bool:
    return _in_bad_fork


def manual_seed_all(seed: int) -> None:
    return None


def memory_allocated(device: int | None = None) -> int:
    return 1 << 20


def max_memory_allocated(device: int | None = None) -> int:
    return 2 << 20


def memory_reserved(device: int | None = None) -> int:
    return 4 << 20


def reset_peak_memory_stats(device: int | None = None) -> None:
    record("reset_peak_memory_stats")
