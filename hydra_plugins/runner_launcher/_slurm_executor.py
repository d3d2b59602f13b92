"""submitit's Slurm executor whose jobs collect a dead job's result as NaN (`TolerantSlurmLauncher` runs it).

Private (`_`): Hydra's plugin scan skips it, so submitit loads only when a Slurm sweep launches
(submitit finds the executor through the entry point group `submitit` in pyproject.toml).
"""

import logging
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from submitit import SlurmExecutor, SlurmJob
from submitit.core.utils import FailedJobError, UncompletedJobError

from runner.job import NO_RESULT

log = logging.getLogger(__name__)


class TolerantSlurmJob(SlurmJob[Any]):
    """A Slurm job whose death is a NaN result, not an exception."""

    def results(self) -> list[Any]:
        """The job's results; one NaN JobReturn when the job died without leaving any."""
        try:
            return list(super().results())
        except (UncompletedJobError, FailedJobError) as err:
            log.error("Slurm job %s died: %s", self.job_id, str(err).splitlines()[0])
            ret = JobReturn(status=JobStatus.COMPLETED)
            ret.return_value = NO_RESULT
            return [ret]


class TolerantSlurmExecutor(SlurmExecutor):
    """Slurm, as submitit runs it, with `TolerantSlurmJob` jobs (executor name: tolerantslurm)."""

    job_class = TolerantSlurmJob
