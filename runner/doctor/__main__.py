"""python -m runner.doctor: the host table, then every probe this host can run; a report to send back.

The report (Markdown) goes once to stdout, progress only to stderr; doctor.md and doctor.json go
to --out, and an MLflow run is tagged runner.kind=doctor. Exit status 1 when an assumption the
runner relies on failed (the report says which config key to set), else 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from runner.backends.cores import format_cores
from runner.config import TrackingConfig
from runner.doctor.cuda_probes import CUDA_PROBE_NAMES, cuda_verdicts
from runner.doctor.host import host_rows, usable_backends
from runner.doctor.neuron_host import NeuronHost, visible_cores
from runner.doctor.neuron_probes import PROBE_NAMES, neuron_verdicts
from runner.doctor.probe import Assumption, ProcessFailed, Verdict, in_fresh_process
from runner.doctor.report import as_json, exit_status, log_report, markdown, write_files
from runner.job import open_run
from runner.secrets import one_line, redact
from runner.signals import exit_code_of, stop_on_signals

DEFAULT_URI = TrackingConfig.uri  # where jobs log by default
_ALL_PROBES = (*PROBE_NAMES, *CUDA_PROBE_NAMES)
# the limit on each probe's fresh process: a hung probe fails, the others still run
PROBE_TIMEOUT_S = 600


def say(line: str) -> None:
    """Progress, on stderr, so stdout holds the report alone."""
    print(line, file=sys.stderr, flush=True)


def show(verdict: Verdict) -> None:
    """That a probe is done: its verdict and evidence are the report's, printed once at the end."""
    say(f"  {verdict.probe} done ({verdict.seconds:g} s)")


def _device_verdicts(usable: list[str], out: Path, only: set[str] | None) -> tuple[list[Verdict], list[str]]:
    """The probes of each device this host has (those in `only`, when given), and a note for each it has not."""
    verdicts: list[Verdict] = []
    notes: list[str] = []
    if "neuron" in usable:
        try:
            cores = in_fresh_process(visible_cores, timeout_s=PROBE_TIMEOUT_S)
        except ProcessFailed as err:
            cores_listed = Assumption("neuron_cores", "the visible NeuronCores can be listed")
            unlisted = cores_listed.fails(str(err), breaks_runner=True)
            show(unlisted)
            return [unlisted], notes
        say(f"Neuron probes on NeuronCores {format_cores(cores)} (captures in {out / 'captures'}) ...")
        verdicts += neuron_verdicts(NeuronHost(cores, out / "captures", PROBE_TIMEOUT_S), show, only)
    else:
        notes.append("No Neuron device here (torch-neuronx missing, or no NeuronCore visible): Neuron probes skipped.")
    if "cuda" in usable and (only is None or only & set(CUDA_PROBE_NAMES)):
        say("CUDA probes ...")
        for verdict in cuda_verdicts(str(out / "captures" / "cuda"), PROBE_TIMEOUT_S):
            show(verdict)
            verdicts.append(verdict)
    else:
        notes.append("No CUDA device here: CUDA probes skipped.")
    return verdicts, notes


def _log_to_store(
    uri: str, experiment: str, host: list[tuple[str, str]], verdicts: list[Verdict], notes: list[str]
) -> list[Verdict]:
    """Log the report as an MLflow run; the store's own verdict is added to the list returned."""
    store = Assumption("mlflow_store", "the MLflow store is reachable and writable")
    try:
        with open_run(TrackingConfig(uri=uri, experiment=experiment), f"doctor {platform.node()}") as run:
            logged = [*verdicts, store.holds(run.describe().splitlines()[0])]
            log_report(run, markdown(host, logged, notes), as_json(host, logged, notes), logged)
            return logged
    except Exception as err:  # noqa: BLE001  (any store failure is this probe's finding)
        fix = "tracking.uri / MLFLOW_TRACKING_URI: every job logs there"
        return [*verdicts, store.fails(f"{redact(uri)}: {one_line(err)}", fix, breaks_runner=True)]


def check(args: argparse.Namespace) -> int:
    """Gather, report, log; the exit status."""
    say("runner doctor: checking this host ...")
    try:
        backends: tuple[list[str], str] | str = in_fresh_process(usable_backends, timeout_s=PROBE_TIMEOUT_S)
    except ProcessFailed as err:
        backends = f"could not tell: {err}"
    host = host_rows(backends, args.uri)
    usable = backends[0] if isinstance(backends, tuple) else []
    verdicts, notes = _device_verdicts(usable, args.out, set(args.probe) if args.probe else None)
    verdicts = _log_to_store(args.uri, args.experiment, host, verdicts, notes)
    show(verdicts[-1])
    page = markdown(host, verdicts, notes)
    md, js = write_files(args.out, page, as_json(host, verdicts, notes))
    print(page)
    say(f"report: {md} and {js}")
    return exit_status(verdicts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m runner.doctor", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI),
        help=f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI or {DEFAULT_URI})",
    )
    parser.add_argument("--experiment", default="doctor", help="MLflow experiment for the report (default: doctor)")
    parser.add_argument("--out", type=Path, default=Path("doctor"), help="folder for doctor.md, doctor.json, captures")
    parser.add_argument("--timeout-s", help=argparse.SUPPRESS)  # removed: refused below, saying why
    parser.add_argument(
        "--probe",
        action="append",
        metavar="NAME",
        help=f"run only this device probe (repeatable); one of: {', '.join(_ALL_PROBES)}",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.probe or ()) - set(_ALL_PROBES))
    if unknown:
        parser.error(f"--probe {unknown[0]!r} is not a probe; choose from: {', '.join(_ALL_PROBES)}")
    if args.timeout_s is not None:
        parser.error(f"--timeout-s was removed: each probe's process has a fixed limit of {PROBE_TIMEOUT_S} s")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the doctor; a stop ends it with 130/143 and no traceback."""
    args = parse_args(argv)
    stop_on_signals()
    try:
        return check(args)
    except KeyboardInterrupt as stop:
        say("doctor: stopped")
        return exit_code_of(stop)


if __name__ == "__main__":
    sys.exit(main())
