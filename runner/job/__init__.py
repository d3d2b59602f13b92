"""A job's life: status, folder, MLflow run, error, failure policy, death (`manifest` loads torch: not re-exported)."""

from runner.job.dead import close_dead_job, close_dead_runs, close_orphans, fail_run, finished_run_id
from runner.job.hashing import config_hash
from runner.job.life import ERROR_FILE, OWNER_FILE, JobInfo, JobLife, claim_folder, release_folder
from runner.job.run import open_run
from runner.job.shared_process import ISOLATED_LAUNCHER, THIS_PROCESS, SharedProcess, own_process_keys
from runner.job.status import NO_RESULT, STATUS_FILE, SWEEP_ID_ENV, JobStatus, read_status, write_status

__all__ = [
    "ERROR_FILE",
    "ISOLATED_LAUNCHER",
    "NO_RESULT",
    "OWNER_FILE",
    "STATUS_FILE",
    "SWEEP_ID_ENV",
    "THIS_PROCESS",
    "JobInfo",
    "JobLife",
    "JobStatus",
    "SharedProcess",
    "claim_folder",
    "close_dead_job",
    "close_dead_runs",
    "close_orphans",
    "config_hash",
    "fail_run",
    "finished_run_id",
    "open_run",
    "own_process_keys",
    "read_status",
    "release_folder",
    "write_status",
]
