"""A real single-node Slurm cluster on localhost, for the Slurm launcher test.

Starts munged, slurmctld and slurmd (Debian's munge and slurm-wlm) from a temporary folder,
as the current user, and stops them afterwards. `SlurmUnavailable` says why it could not.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")
START_TIMEOUT_S = 60


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here; the message says why."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _slurm_conf(root: Path, host: str, cpus: int, memory_mb: int, user: str) -> str:
    """A random first job id: submitit picks a rendezvous port from the job id, so two test clusters
    numbering their jobs alike would give two concurrent ranked jobs the same port (EADDRINUSE)."""
    return f"""ClusterName=runner-test
FirstJobId={random.randint(1, 60_000_000)}
SlurmctldHost={host}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _drain(env: dict[str, str]) -> None:
    """Let finished jobs' steps close (then cancel what is left) before the daemons stop.

    Stopping slurmd under a job step that is still closing leaves slurmstepd and srun waiting
    for it forever.
    """
    deadline = time.monotonic() + START_TIMEOUT_S
    while subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", "--full", "--partition=debug"], env=env, capture_output=True)
            break
        time.sleep(0.5)


@contextmanager
def local_slurm(root: Path) -> Iterator[dict[str, str]]:
    """Run a one-node cluster under `root`; yield the environment that points clients at it.

    Raises:
        SlurmUnavailable: a binary is missing or a daemon did not come up.
    """
    missing = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        raise SlurmUnavailable(f"not installed: {', '.join(missing)} (Debian packages slurm-wlm and munge)")
    for sub in ("state", "spool"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    host = socket.gethostname().split(".")[0]
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, host, os.cpu_count() or 1, memory_mb, os.environ.get("USER") or "root"))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = []
    try:
        daemons.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={root}/munge.socket", f"--key-file={key}",
             f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log", f"--seed-file={root}/munged.seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        time.sleep(0.5)
        for daemon in ("slurmctld", "slurmd"):
            daemons.append(subprocess.Popen(
                [daemon, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ))  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
            if state.startswith("idle"):
                break
            dead = [d.args[0] for d in daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "".join(p.read_text()[-600:] for p in root.glob("slurm*.log"))
                raise SlurmUnavailable(f"cluster did not come up (node state {state!r}, exited: {dead}): {logs}")
            time.sleep(0.5)
        yield env
        _drain(env)
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
