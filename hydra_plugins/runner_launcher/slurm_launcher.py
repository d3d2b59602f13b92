"""Hydra's submitit Slurm launcher, changed so that a job that dies hard fails alone.

The stock launcher waits for each job's result and raises at the first job that died
(segfault, out-of-memory kill, time limit), which ends the sweep before its summary and
cleanup. Here such a job yields a NaN result instead: its `job_status.json` still says
RUNNING, so the sweep's end-of-run cleanup marks its MLflow run FAILED, names it in the
summary and exits non-zero, as with the local launchers.

The change goes through submitit's public plugin interface: `TolerantSlurmExecutor` is
registered as a submitit executor (entry point group `submitit`, in pyproject.toml), and
its jobs collect a dead job's result as NaN. Inside the batch job nothing changes: the
sbatch script still announces the `slurm` environment.

Hydra lists (`--info plugins`) every launcher class it finds in a plugin module's namespace, under
the class's own name, so the stock launcher is reached through its module, not imported by name:
imported, it was listed a second time as `SlurmLauncher`, and this one a third.
"""

import logging
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from submitit import SlurmExecutor, SlurmJob
from submitit.core.utils import FailedJobError, UncompletedJobError

log = logging.getLogger(__name__)


class TolerantSlurmJob(SlurmJob[Any]):
    """A Slurm job whose death is a NaN result, not an exception."""

    def results(self) -> list[Any]:
        """The job's results; one NaN JobReturn when the job died without leaving any."""
        try:
            return list(super().results())
        except (UncompletedJobError, FailedJobError) as err:
            from runner.job import NO_RESULT  # the plugin loads with every Hydra command; the runner only here

            log.error("Slurm job %s died: %s", self.job_id, str(err).splitlines()[0])
            ret = JobReturn(status=JobStatus.COMPLETED)
            ret.return_value = NO_RESULT
            return [ret]


class TolerantSlurmExecutor(SlurmExecutor):
    """Slurm, as submitit runs it, with `TolerantSlurmJob` jobs (executor name: tolerantslurm)."""

    job_class = TolerantSlurmJob


class TolerantSlurmLauncher(submitit_launcher.SlurmLauncher):  # type: ignore[misc]  # the plugin ships no types
    """Hydra's submitit `SlurmLauncher`, one Slurm job per sweep job, through `TolerantSlurmExecutor`."""

    _EXECUTOR = TolerantSlurmExecutor.name()
