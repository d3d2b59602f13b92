"""Hydra's submitit Slurm launcher, changed so that a job that dies hard fails alone.

The stock launcher waits for each job's result and raises at the first job that died
(segfault, out-of-memory kill, time limit), which ends the sweep before its summary and
cleanup. Here such a job yields a NaN result instead: its `job_status.json` still says
RUNNING, so the sweep's end-of-run cleanup marks its MLflow run FAILED, names it in the
summary and exits non-zero, as with the local launchers.
"""

import logging
from collections.abc import Sequence
from typing import Any
from unittest import mock

from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher

log = logging.getLogger(__name__)


class SlurmLauncher(SubmititSlurmLauncher):  # type: ignore[misc]  # the plugin ships no types
    """Submits one Slurm job per sweep job; a job that dies hard does not stop the others."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Launch as Hydra's submitit launcher does, but collect dead jobs' results as NaN."""
        import submitit
        from submitit.core.utils import FailedJobError, UncompletedJobError

        collect = submitit.Job.results

        def tolerant_results(job: Any) -> list[JobReturn]:
            try:
                return list(collect(job))
            except (UncompletedJobError, FailedJobError) as err:
                log.error("Slurm job %s died: %s", job.job_id, str(err).splitlines()[0])
                ret = JobReturn(status=JobStatus.COMPLETED)
                ret.return_value = float("nan")
                return [ret]

        with mock.patch.object(submitit.Job, "results", tolerant_results):
            results: Sequence[JobReturn] = super().launch(job_overrides, initial_job_idx)
        return results
