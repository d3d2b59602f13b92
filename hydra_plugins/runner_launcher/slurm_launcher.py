"""Hydra's submitit Slurm launcher, changed so that a job that dies hard fails alone.

The stock launcher waits for each job's result and raises at the first job that died
(segfault, out-of-memory kill, time limit), which ends the sweep before its summary and
cleanup. Here such a job yields a NaN result instead: its `job_status.json` still says
RUNNING, so the sweep's end-of-run cleanup marks its MLflow run FAILED, names it in the
summary and exits non-zero, as with the local launchers.

The change goes through submitit's public plugin interface: the launcher names the executor
`tolerantslurm` (`_slurm_executor.py`, registered as a submitit executor through the entry point
group `submitit` in pyproject.toml), whose jobs collect a dead job's result as NaN. That module is
private so that Hydra's plugin scan, which imports every public module here on every command,
imports neither it nor submitit: `python -m runner` refuses a bad config without loading Slurm support.

Hydra lists (`--info plugins`) every launcher class it finds in a plugin module's namespace, under
the class's own name, so the stock launcher is reached through its module, not imported by name:
imported, it was listed a second time as `SlurmLauncher`, and this one a third.
"""

from hydra_plugins.hydra_submitit_launcher import submitit_launcher


class TolerantSlurmLauncher(submitit_launcher.SlurmLauncher):  # type: ignore[misc]  # the plugin ships no types
    """Hydra's submitit `SlurmLauncher`, one Slurm job per sweep job, through `TolerantSlurmExecutor`."""

    _EXECUTOR = "tolerantslurm"  # submitit's name for _slurm_executor.TolerantSlurmExecutor
