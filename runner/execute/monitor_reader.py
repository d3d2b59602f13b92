"""A device monitor's reader: a process of its own that runs the device's monitor tool and keeps the job's figures.

The tool (`runner.backends.monitor.MonitorTool`, e.g. `runner.backends.neuron_monitor`) says what to run and how
its lines read; parsing them in the measuring process took CPU while it was timed. `python -m
runner.execute.monitor_reader TOOL_MODULE JOB_PID CONFIG_FILE SAMPLES_FILE` appends one JSON line of figures per
report, imports no torch, and stops the tool when stopped (SIGTERM) or killed (`die_with_parent`).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import FrameType
from typing import cast

from runner.backends.monitor import MonitorTool
from runner.execute.processes import die_with_parent, end_process


def in_child(parent_pid: int) -> None:
    """In the reader and in the tool, before they run: die with the parent, leave Ctrl-C to the job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(tool: MonitorTool, job_pid: int, config_file: str, samples_file: Path) -> int:
    """Run the tool until stopped or until it ends; its exit status when it ended on its own."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        monitor = subprocess.Popen(
            tool.command(config_file),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=partial(in_child, os.getpid()),  # signal set-up only, between fork and exec
        )
    except OSError as err:
        print(f"system metrics: {tool.NAME} did not start: {err}", file=sys.stderr)
        return 1
    assert monitor.stdout is not None
    try:
        with samples_file.open("a") as out:
            for line in monitor.stdout:
                sample = tool.figures(line, job_pid)
                if sample is not None and (sample["values"] or sample["errors"]):
                    out.write(json.dumps(sample) + "\n")
                    out.flush()
    finally:
        end_process(monitor)
        monitor.stdout.close()
    return monitor.returncode


if __name__ == "__main__":
    device_tool = cast(MonitorTool, importlib.import_module(sys.argv[1]))
    sys.exit(main(device_tool, int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])))
