"""Reading a Neuron capture: the documented failure signs, and neuron-explorer's summary (Parquet or summary-json).

The layout is searched recursively: the documented `<instance>_pid_<pid>/<timestamp>/` levels may
be missing, and older builds wrote `*_instid_*_vnc_*.ntff` without a timestamp. Explorer's Parquet
also holds system-profile tables, read as metrics: each event source's events and time, and the HBM peak.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import names
from runner.backends.base import CaptureReport
from runner.backends.neuron_tools import neuron_tool

log = logging.getLogger(__name__)

# NRT prints this when the per-NeuronCore ring buffer overflows.
DROPPED_EVENTS = re.compile(r"(\d[\d,]*) trace events were dropped")
# neuron-explorer replaced neuron-profile (SDK 2.30) with the same `view` interface.
_EXPLORERS = ("neuron-explorer", "neuron-profile")
# Explorer's summary formats, in the order asked for: Parquet is its default and programmatic output;
# summary-json stays, and is all the legacy neuron-profile writes
PARQUET = "parquet"
SUMMARY_JSON = "summary-json"
_EXPLORER_FORMATS = (PARQUET, SUMMARY_JSON)
# Parquet profile schemas the runner reads, by MAJOR version (only a MAJOR change removes or renames
# fields: profile-schema-reference.rst). That 12.0.1's Summary keeps 7.4.0's total_time (seconds) is
# inferred, so a Summary without it is read as an unknown schema
KNOWN_SCHEMAS = {"7": "7.x (7.4.0: Neuron SDK 2.31)", "12": "12.x (12.0.1: Neuron SDK 2.33)"}
# the Summary column of on-device time, idle gaps included: device-time coverage needs it
_TOTAL_TIME = "total_time"
# the Summary column of busy time, "the union of all active intervals" of engines, DMA and collectives
# (profile-schema-reference.rst, Summary): coverage's denominator where every profile has it
_TOTAL_ACTIVE_TIME = "total_active_time"
# SchemaFields' `field_unit` of a time field, in seconds each: the reference writes "seconds" (Summary) and
# "nanoseconds" (timestamps); the other spellings are accepted, unconfirmed by any document
_SECONDS_PER_UNIT = {
    "seconds": 1.0, "s": 1.0, "milliseconds": 1e-3, "ms": 1e-3,
    "microseconds": 1e-6, "us": 1e-6, "nanoseconds": 1e-9, "ns": 1e-9,
}  # fmt: skip
# the Summary's other units in schema 7.4.0: logged as they are
_UNITS_AS_IS = ("percent", "flops", "bytes", "cycles")
# a Parquet `view` past this many seconds is left for summary-json: processing can stall (troubleshooting.rst), and a
# hung view would hold the job for backend.explorer_timeout_s before summary-json is asked for
VIEW_TIMEOUT_S = 300
_VIEW_LIMIT = "the runner's limit for a Parquet view"
_VIEW_TIMED_OUT = "did not finish in {seconds} s (" + _VIEW_LIMIT + ")"
UNVERSIONED = "unversioned (summary-json carries no schema version)"
NO_SOURCE = "none"
NOT_RUN = "not run: the capture holds no device profile (no NTFF beside its NEFF)"
_SUMMARY_JSON_SHAPES = "{profile: {metric: value}} or one flat object of metrics"
# Tables and columns of `SDK:tools/neuron-explorer/profile-schema-reference.rst` (schema 7.4.0; that 12.0.1
# keeps them is inferred): `SystemProfileEvents` (`duration_ns`, `trace_event_source`: "neuron_rt" the
# runtime, "neuron_hw" a device, "framework") and `SystemProfileHbmUsage` (`total_bytes` in use).
EVENT_SOURCES = ("neuron_rt", "neuron_hw", "framework")


@dataclass
class CaptureCheck:
    """File counts of a capture and the problems found in it."""

    files: int = 0
    total_bytes: int = 0
    ntff: int = 0
    empty_ntff: int = 0
    neff: int = 0
    pb: int = 0
    framework_traces: int = 0
    dropped_events: int = 0
    problems: list[str] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """`neuron/capture_*` metrics; capture_ok is 1 when no failure sign was found."""
        return {
            names.NEURON_CAPTURE_OK: float(not self.problems),
            names.NEURON_CAPTURE_FILES: float(self.files),
            names.NEURON_CAPTURE_BYTES: float(self.total_bytes),
            names.NEURON_NTFF_FILES: float(self.ntff),
            names.NEURON_NEFF_FILES: float(self.neff),
            names.NEURON_PB_FILES: float(self.pb),
            names.NEURON_DROPPED_EVENTS: float(self.dropped_events),
        }

    def tags(self) -> dict[str, Any]:
        """`neuron.capture` is ok or warning; `neuron.capture_problems` says why."""
        return {
            names.TAG_NEURON_CAPTURE: "warning" if self.problems else "ok",
            names.TAG_NEURON_CAPTURE_PROBLEMS: "; ".join(self.problems) or None,
        }


def check_capture(capture_dir: Path, modes: list[str], profiler_output: str) -> CaptureCheck:
    """Check a capture against the failure signs the Neuron documentation lists."""
    files = [p for p in capture_dir.rglob("*") if p.is_file()] if capture_dir.is_dir() else []
    check = CaptureCheck(
        files=len(files),
        total_bytes=sum(p.stat().st_size for p in files),
        ntff=sum(1 for p in files if p.suffix == ".ntff"),
        empty_ntff=sum(1 for p in files if p.suffix == ".ntff" and p.stat().st_size == 0),
        neff=sum(1 for p in files if p.suffix == ".neff"),
        pb=sum(1 for p in files if p.suffix == ".pb"),
        framework_traces=sum(1 for p in files if p.suffix == ".json"),
        dropped_events=sum(int(n.replace(",", "")) for n in DROPPED_EVENTS.findall(profiler_output)),
    )
    if not files:
        check.problems.append("empty capture directory: profiling did not run, or the workload did not run on Neuron")
        return check
    if check.empty_ntff:
        check.problems.append(f"{check.empty_ntff} zero-byte NTFF(s): device profiling was on but nothing executed")
    if "DEVICE" in modes and not check.ntff:
        check.problems.append("only system traces (.pb), no device trace (.ntff), although DEVICE was asked for")
    if "DEVICE" in modes and not check.neff:
        check.problems.append("no .neff although DEVICE was asked for: device traces cannot be decoded")
    if not check.framework_traces:
        check.problems.append("no framework trace (trace.json) beside the system traces")
    if check.dropped_events:
        check.problems.append(f"{check.dropped_events} trace events were dropped: raise profiler.max_events_per_nc")
    return check


def session_dirs(capture_dir: Path) -> list[Path]:
    """Folders holding a device profile, a non-empty NTFF beside a NEFF: what Explorer's Summary comes from.

    An NTFF cannot be processed without the NEFF it was captured from (profile-artifacts, docs site).
    """
    ntffs = capture_dir.rglob("*.ntff") if capture_dir.is_dir() else iter(())
    return sorted({p.parent for p in ntffs if p.stat().st_size and any(p.parent.glob("*.neff"))})


def first_json_object(text: str) -> dict[str, Any]:
    """The first complete JSON object in `text`, skipping log lines (which may hold braces).

    Raises:
        ValueError: there is none.
    """
    decoder = json.JSONDecoder()
    for brace in re.finditer(r"\{", text):
        try:
            data, _ = decoder.raw_decode(text, brace.start())
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    raise ValueError("no JSON object in the summary output")


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric values of one profile's metrics (names, flags and missing values dropped)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class UnknownSchema(ValueError):
    """Explorer's output is in a schema the runner does not read: said in one line, never a KeyError."""


def parse_summary_json(stdout: str, source: str = "summary-json") -> dict[str, dict[str, float]]:
    """Parse `view --output-format summary-json`: log lines, then one object per profile, in an undocumented shape.

    Raises:
        ValueError: no JSON object in the output.
        UnknownSchema: the object holds no metric in either shape (`source` names where it came from).
    """
    data = first_json_object(stdout)
    entries = data if data and all(isinstance(v, dict) for v in data.values()) else {"summary": data}
    found = {str(name): numeric(metrics) for name, metrics in entries.items()}
    if data and not any(found.values()):
        keys = ", ".join(sorted(data)[:6])
        raise UnknownSchema(
            f"{source}: summary-json holds no metric (top-level keys: {keys}); the runner reads {_SUMMARY_JSON_SHAPES}"
        )
    return found


def _parquet_tables(folder: Path, table: str) -> list[Path]:
    """The files of one Parquet table, split or not (`Summary.parquet`, `Summary_0.parquet`, ...)."""
    pattern = re.compile(rf"^{table}(_\d+)?\.parquet$")
    return sorted(p for p in folder.rglob("*.parquet") if pattern.match(p.name))


def _system_profile_metrics(folder: Path) -> dict[str, float]:
    """Each source's event count and summed ms (nested events each count), and the HBM peak; empty without RUNTIME."""
    import pyarrow.parquet as pq

    metrics: defaultdict[str, float] = defaultdict(float)
    for path in _parquet_tables(folder, "SystemProfileEvents"):
        for row in pq.read_table(path, columns=["duration_ns", "trace_event_source"]).to_pylist():
            if (source := row["trace_event_source"]) in EVENT_SOURCES:
                metrics[names.NEURON_SYSTEM_EVENTS.format(source=source)] += 1
                metrics[names.NEURON_SYSTEM_MS.format(source=source)] += row["duration_ns"] / 1e6
    hbm = [row for p in _parquet_tables(folder, "SystemProfileHbmUsage") for row in pq.read_table(p).to_pylist()]
    if hbm:
        metrics[names.NEURON_SYSTEM_HBM_PEAK_BYTES] = device_hbm_peak(hbm)
    return dict(metrics)


def device_hbm_peak(rows: list[dict[str, Any]]) -> float:
    """The most HBM a device had in use: at each sample its stacks' latest `total_bytes` summed, the highest device's.

    A SystemProfileHbmUsage row is one HBM stack's (`hbm_idx` on `device_idx` of `instance_id`), and
    several NeuronCores may share a stack (profile-schema-reference.rst), so one row's is no device's.
    """
    devices: defaultdict[tuple[Any, Any], dict[Any, int]] = defaultdict(dict)
    peak = 0
    for row in sorted(rows, key=lambda row: row["timestamp"]):
        stacks = devices[row.get("instance_id"), row.get("device_idx")]
        stacks[row.get("hbm_idx")] = row["total_bytes"]
        peak = max(peak, sum(stacks.values()))
    return float(peak)


def add_system_metrics(total: dict[str, float], session: dict[str, float]) -> None:
    """Add one session's figures to the capture's: counts and times add up, the HBM peak is the highest."""
    for key, value in session.items():
        peak = key == names.NEURON_SYSTEM_HBM_PEAK_BYTES
        total[key] = max(total.get(key, value), value) if peak else total.get(key, 0.0) + value


def parquet_available() -> bool:
    """Whether pyarrow can be imported (MLflow depends on it; a bare environment may still lack it)."""
    return importlib.util.find_spec("pyarrow") is not None


def _summary_units(folder: Path) -> dict[str, str]:
    """SchemaFields' `field_unit` of each Summary field; empty without that table (the documented units hold)."""
    import pyarrow.parquet as pq

    rows = [row for path in _parquet_tables(folder, "SchemaFields") for row in pq.read_table(path).to_pylist()]
    summary = (row for row in rows if row["table_name"] == "Summary" and row.get("field_unit"))
    return {row["field_name"]: row["field_unit"] for row in summary}


def _in_seconds(metrics: dict[str, float], units: dict[str, str], where: Path) -> dict[str, float]:
    """One Summary row with its time fields in seconds, the unit the runner logs and compares them in.

    Raises:
        UnknownSchema: a field in a unit the runner neither converts nor logs as it is (field and unit named).
    """
    converted = {}
    for name, value in metrics.items():
        unit = units.get(name)
        if unit is not None and unit not in _SECONDS_PER_UNIT and unit not in _UNITS_AS_IS:
            known = ", ".join([*_SECONDS_PER_UNIT, *_UNITS_AS_IS])
            raise UnknownSchema(f"{where}: Summary field {name} is in {unit!r}, not a unit the runner reads ({known})")
        converted[name] = value * _SECONDS_PER_UNIT.get(unit or "", 1.0)
    return converted


def read_parquet_summary(folder: Path) -> tuple[dict[str, dict[str, float]], str, set[int]]:
    """A processed profile's `Summary` rows (times in seconds), `profile_schema_version` and `num_physical_cores`.

    Rows are keyed by their file's path in `folder` and row number: Explorer may write a Summary per
    profile in folders of their own (`profiles/global/<display-name>@latest/`), all named alike.

    Raises:
        ValueError: the folder holds no Summary or no Metadata table.
        UnknownSchema: a schema whose MAJOR version the runner does not read, a Summary without total_time,
            or a Summary field in a unit the runner does not read.
    """
    import pyarrow.parquet as pq

    metadata, summaries = _parquet_tables(folder, "Metadata"), _parquet_tables(folder, "Summary")
    if not metadata or not summaries:
        raise ValueError(f"no Summary and Metadata tables in Explorer's Parquet output {folder}")
    versions = []
    physical_cores: set[int] = set()
    for path in metadata:
        for row in pq.read_table(path).to_pylist():
            if row.get("num_physical_cores") is not None:
                physical_cores.add(int(row["num_physical_cores"]))
            version = str(row.get("profile_schema_version") or "(none)")
            if version.split(".")[0] not in KNOWN_SCHEMAS:
                raise UnknownSchema(
                    f"{path}: profile schema {version} is not one the runner reads "
                    f"(it reads {', '.join(KNOWN_SCHEMAS.values())})"
                )
            versions.append(version)
    units = _summary_units(folder)
    entries = {
        f"{path.relative_to(folder)}#{number}": _in_seconds(numeric(row), units, path)
        for path in summaries
        for number, row in enumerate(pq.read_table(path).to_pylist())
    }
    if not all(_TOTAL_TIME in row for row in entries.values()):
        raise UnknownSchema(f"{summaries[0]}: profile schema {versions[0]} has no Summary column {_TOTAL_TIME}")
    return entries, ", ".join(sorted(set(versions))), physical_cores


@dataclass
class ExplorerSummary(CaptureReport):
    """Device-side metrics from neuron-explorer, how getting them went, and the summary as JSON."""

    raw: str = ""
    # Metadata's num_physical_cores (physical NeuronCores per logical one) of each profile; Parquet only
    physical_cores: set[int] = field(default_factory=set)


@dataclass
class Summary:
    """One session's summary in one format."""

    # metrics by profile, time fields in seconds
    profiles: dict[str, dict[str, float]]
    schema: str
    # the summary as JSON, for the run's artifact
    raw: str
    system: dict[str, float] = field(default_factory=dict)
    physical_cores: set[int] = field(default_factory=set)


def _view(tool: str, session: Path, fmt: str, timeout_s: int) -> Summary:
    """One session's summary in one format; raises OSError, SubprocessError or ValueError where there is none."""
    cmd = [tool, "view", "-d", str(session), "--output-format", fmt]
    if fmt == SUMMARY_JSON:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True)
        found = parse_summary_json(done.stdout, str(session))
        return Summary(found, UNVERSIONED, json.dumps(first_json_object(done.stdout)))
    with tempfile.TemporaryDirectory(prefix="neuron_explorer_") as out:
        subprocess.run([*cmd, "--output-file", out], capture_output=True, text=True, timeout=timeout_s, check=True)
        found, schema, physical_cores = read_parquet_summary(Path(out))
        return Summary(found, schema, json.dumps(found), _system_profile_metrics(Path(out)), physical_cores)


def _summarise(
    tool: str, session: Path, formats: tuple[str, ...], timeouts_s: dict[str, int]
) -> tuple[str, Summary, list[str]]:
    """The first of `formats` read, the session's summary in it, and why earlier formats were not read.

    Not read: an unknown schema, or a `view` past its format's timeout in `timeouts_s`.

    Raises:
        UnknownSchema: the last format's output is in a schema the runner does not read.
        OSError, subprocess.SubprocessError, ValueError: no format gave a summary (the last one's error).
    """
    unread: list[str] = []
    for fmt in formats:
        try:
            return fmt, _view(tool, session, fmt, timeouts_s[fmt]), unread
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            if fmt == formats[-1]:
                raise
            detail = getattr(err, "stderr", None) or str(err)
            log.info("%s gave no %s summary of %s (%s); asking for the next format", tool, fmt, session, detail)
            if isinstance(err, subprocess.TimeoutExpired):
                unread.append(f"{tool} view --output-format {fmt} {_VIEW_TIMED_OUT.format(seconds=timeouts_s[fmt])}")
            elif isinstance(err, UnknownSchema):
                unread.append(str(err))
    raise ValueError("no Explorer format to ask for")


def explorer_summary(
    sessions: list[Path],
    timeout_s: int,
    formats: tuple[str, ...] = _EXPLORER_FORMATS,
) -> ExplorerSummary:
    """Summarise each device profile with neuron-explorer, Parquet first where pyarrow can read it; never raise.

    Parquet in an unknown schema falls back to summary-json (troubleshooting.rst: "Is summary-json still
    supported? Yes"), and so does a Parquet `view` running past VIEW_TIMEOUT_S (`timeout_s` bounds summary-json); after
    one such, no later session asks for Parquet. With several profiles (one per NEFF in eager mode),
    `neuron/<metric>` comes from the one with the largest total_time, and `neuron/total_time_sum` adds them
    all up, as `neuron/total_active_time_sum` adds their busy time where every profile gives it.
    """
    tags: dict[str, Any] = {names.TAG_NEURON_EXPLORER_SOURCE: NO_SOURCE}
    if not sessions:
        tags[names.TAG_NEURON_EXPLORER] = NOT_RUN
        return ExplorerSummary(tags=tags)
    tool = next(filter(None, map(neuron_tool, _EXPLORERS)), None)
    if tool is None:
        tags[names.TAG_NEURON_EXPLORER] = "not on PATH nor in /opt/aws/neuron/bin (install aws-neuronx-tools)"
        return ExplorerSummary(tags=tags)
    unread: dict[str, None] = {}  # why Parquet was not read, in order, once each
    fell_back = False  # from Parquet in an unknown schema, or past its timeout, to summary-json
    if PARQUET in formats and not parquet_available():
        formats = tuple(f for f in formats if f != PARQUET)
        unread["pyarrow is not installed"] = None
    timeouts_s = {SUMMARY_JSON: timeout_s, PARQUET: VIEW_TIMEOUT_S}
    entries: dict[str, dict[str, float]] = {}
    system_metrics: dict[str, float] = {}
    physical_cores: set[int] = set()
    sources: set[str] = set()  # the neuron.explorer_source tag: parquet-<MAJOR> or summary-json
    schemas: set[str] = set()
    outputs = []
    for session in sessions:
        try:
            fmt, summary, schemas_unread = _summarise(tool, session, formats, timeouts_s)
        except UnknownSchema as err:
            tags[names.TAG_NEURON_EXPLORER] = f"{tool}: {err}"
            return ExplorerSummary(tags=tags, warnings=[f"neuron-explorer's summary is not read: {err}"])
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            detail = getattr(err, "stderr", None) or str(err)
            log.warning("%s failed on %s: %s", tool, session, str(detail).strip()[:500])
            tags[names.TAG_NEURON_EXPLORER] = f"{tool} failed: {str(detail).strip()[:200]}"
            return ExplorerSummary(tags=tags)
        unread.update(dict.fromkeys(schemas_unread))
        fell_back = fell_back or bool(schemas_unread)
        if any(_VIEW_LIMIT in why for why in schemas_unread):
            formats = tuple(f for f in formats if f != PARQUET)
        sources.add(f"{fmt}-{summary.schema.split('.')[0]}" if fmt == PARQUET else fmt)
        schemas.add(summary.schema)
        outputs.append(summary.raw)
        add_system_metrics(system_metrics, summary.system)
        physical_cores |= summary.physical_cores
        # by the whole path: sessions of two processes can share a timestamp folder name
        entries.update({f"{session}/{name}": metrics for name, metrics in summary.profiles.items()})
    tags[names.TAG_NEURON_EXPLORER_SOURCE] = ", ".join(sorted(sources))
    tags[names.TAG_NEURON_EXPLORER_SCHEMA] = ", ".join(sorted(schemas))
    not_read = "; ".join(unread)
    tags[names.TAG_NEURON_EXPLORER] = f"{tool}: ok" + (f" (Parquet not read: {not_read})" if not_read else "")
    warnings = [f"neuron-explorer's Parquet is not read ({not_read}): its summary-json is"] if fell_back else []
    largest = max(entries.values(), key=lambda m: m.get(_TOTAL_TIME, 0.0), default={})
    metrics = {f"{names.NEURON_SUMMARY_PREFIX}{k}": v for k, v in largest.items()}
    metrics[names.NEURON_PROFILES] = float(len(entries))
    metrics[names.NEURON_TOTAL_TIME_SUM] = sum(m.get(_TOTAL_TIME, 0.0) for m in entries.values())
    if entries and all(_TOTAL_ACTIVE_TIME in m for m in entries.values()):
        metrics[names.NEURON_TOTAL_ACTIVE_TIME_SUM] = sum(m[_TOTAL_ACTIVE_TIME] for m in entries.values())
    metrics.update(system_metrics)
    return ExplorerSummary(
        metrics=metrics, tags=tags, raw="\n".join(outputs), warnings=warnings, physical_cores=physical_cores
    )
