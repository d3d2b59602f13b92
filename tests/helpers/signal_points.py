"""Hydra callbacks a test adds to a real `python -m runner` (`+hydra.callbacks.NAME._target_=...`) so that
a signal lands at one point of its life, every time: no sleep that guesses how long a phase takes."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class PauseInComparison(Callback):
    """The sweep's comparison, once its table is logged to the parent and before its plots, writes `flag` and
    waits until the test, its signal sent, removes it (at most `wait_s`)."""

    def __init__(self, flag: str, wait_s: float = 120) -> None:
        self.flag = Path(flag)
        self.wait_s = wait_s

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from runner.report import plots

        write_plots = plots.write_plots

        def paused(*args: Any, **kwargs: Any) -> Any:
            self.flag.touch()
            deadline = time.monotonic() + self.wait_s
            while self.flag.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            return write_plots(*args, **kwargs)

        plots.write_plots = paused


class SignalAfterJob(Callback):
    """The job's process sends itself `signum` once the job has returned: its run is closed FINISHED by then."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.kill(os.getpid(), self.signum)
