"""Neuron helpers that need no device: core specs, capture checks, summary parsing, budgets."""

from __future__ import annotations

import json
import time
from pathlib import Path

import mlflow
import pytest

from runner import names
from runner.backends import neuron_capture
from runner.backends.cores import format_cores, lnc_check, logical_nc_config, parse_core_range, parse_cores
from runner.backends.neuron_capture import (
    UnknownSchema,
    check_capture,
    explorer_summary,
    parse_summary_json,
    session_dirs,
)
from runner.config import ConfigError, NeuronBackendConfig, TrackingConfig
from runner.job import open_run
from runner.job.manifest import allowed_environment
from runner.tracking.run import split_by_budget
from tests.helpers import STANDIN_PATH

# the stand-in's tools first, then only the system's
TOOLS_PATH = f"{STANDIN_PATH}:/usr/bin:/bin"


@pytest.mark.parametrize(
    ("spec", "cores", "text"),
    [("0", [0], "0"), ("0-1", [0, 1], "0-1"), ("0,2-3", [0, 2, 3], "0,2-3"), ("3,1,2", [1, 2, 3], "1-3")],
)
def test_core_specs_round_trip(spec: str, cores: list[int], text: str) -> None:
    assert parse_cores(spec, "profiler.capture_enabled_for_nc") == cores
    assert format_cores(cores) == text


@pytest.mark.parametrize("spec", ["", "a", "0-", "-1", "0,,1", "1-0", "0;1"])
def test_bad_core_specs_show_the_syntax(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"backend\.cores=.*a range \(0-3\) or a comma list \(0-3,8-11\)"):
        parse_core_range(spec, "backend.cores")


@pytest.mark.parametrize("spec", ["0,2-3", "3,5,6", "0-1,3"])
def test_neuron_cores_must_be_one_contiguous_range(spec: str) -> None:
    # the runtime refuses NEURON_RT_VISIBLE_CORES that is not contiguous (reference section 10.1)
    with pytest.raises(ConfigError, match=rf"backend\.cores='{spec}' is not one contiguous range of NeuronCores"):
        NeuronBackendConfig(cores=spec)
    assert parse_core_range("3,4,5", "backend.cores") == [3, 4, 5]


def write_capture(root: Path, files: dict[str, bytes]) -> Path:
    session = root / "i-0abc_pid_42" / "20261129_120000_000"
    root.mkdir(exist_ok=True)
    session.mkdir(parents=True)
    for name, data in files.items():
        (session / name).write_bytes(data)
    return session


GOOD = {
    "ntrace.pb": b"x",
    "trace_info.pb": b"x",
    "neff_1_vnc_0.neff": b"x",
    "profile_nc_0_session_0.ntff": b"x",
    "trace.json": b"{}",
}


def test_a_complete_capture_passes(tmp_path: Path) -> None:
    write_capture(tmp_path / "cap", GOOD)
    check = check_capture(tmp_path / "cap", ["DEVICE", "RUNTIME"], "")
    assert check.problems == []
    assert check.metrics()[names.NEURON_CAPTURE_OK] == 1.0 and check.tags()[names.TAG_NEURON_CAPTURE] == "ok"
    assert (check.ntff, check.neff, check.pb, check.files) == (1, 1, 2, 5)


@pytest.mark.parametrize(
    ("files", "modes", "output", "problem"),
    [
        pytest.param({}, ["DEVICE"], "", "empty capture directory", id="empty"),
        pytest.param({**GOOD, "profile_nc_0_session_0.ntff": b""}, ["DEVICE"], "", "1 zero-byte NTFF", id="0-byte"),
        pytest.param({k: v for k, v in GOOD.items() if "neff" not in k}, ["DEVICE"], "", "no .neff", id="no-neff"),
        pytest.param({"ntrace.pb": b"x", "trace.json": b"{}"}, ["DEVICE", "RUNTIME"], "", "only system", id="only-pb"),
        pytest.param(GOOD, ["DEVICE"], "Warning: 1,234 trace events were dropped", "1234 trace events", id="dropped"),
        pytest.param(
            {k: v for k, v in GOOD.items() if k != "trace.json"}, ["DEVICE"], "", "no framework", id="no-json"
        ),
    ],
)
def test_failure_signs_are_reported(
    tmp_path: Path, files: dict[str, bytes], modes: list[str], output: str, problem: str
) -> None:
    if files:
        write_capture(tmp_path / "cap", files)
    check = check_capture(tmp_path / "cap", modes, output)
    assert any(problem in p for p in check.problems), check.problems
    assert check.metrics()[names.NEURON_CAPTURE_OK] == 0.0 and check.tags()[names.TAG_NEURON_CAPTURE] == "warning"


def test_a_system_only_capture_is_fine_without_device_files(tmp_path: Path) -> None:
    write_capture(tmp_path / "cap", {"ntrace.pb": b"x", "cpu_util.pb": b"x", "trace.json": b"{}"})
    assert check_capture(tmp_path / "cap", ["RUNTIME", "CPU_UTIL"], "").problems == []


def test_summary_json_after_log_lines_with_one_entry_per_neff() -> None:
    out = 'INFO: loading {profile}\nINFO x\n{"neff_1": {"total_time": 0.5, "name": "a"}, "neff_2": {"total_time": 2}}'
    assert parse_summary_json(out) == {"neff_1": {"total_time": 0.5}, "neff_2": {"total_time": 2.0}}


def test_summary_json_flat_object_and_garbage() -> None:
    assert parse_summary_json('{"total_time": 1.5, "ok": true}') == {"summary": {"total_time": 1.5}}
    with pytest.raises(ValueError, match="no JSON object"):
        parse_summary_json("ERROR: nothing here")


def test_summary_json_of_an_unknown_shape_is_one_line_not_an_empty_summary() -> None:
    with pytest.raises(UnknownSchema) as raised:
        parse_summary_json('INFO x\n{"profiles": [{"total_time": 1.5}], "version": "9"}', "cap/session")
    assert str(raised.value) == (
        "cap/session: summary-json holds no metric (top-level keys: profiles, version); "
        "the runner reads {profile: {metric: value}} or one flat object of metrics"
    )
    assert parse_summary_json("{}") == {"summary": {}}  # an empty summary is no schema


@pytest.mark.parametrize(
    ("env", "source", "schema"),
    [
        pytest.param({}, "parquet-12", "12.0.1", id="parquet-12"),  # SDK 2.33's schema, the stand-in's default
        pytest.param({"NEURON_STANDIN_EXPLORER_SCHEMA": "7.4.0"}, "parquet-7", "7.4.0", id="parquet-7"),
        # an Explorer without Parquet (the legacy neuron-profile): the runner asks for summary-json next
        pytest.param({"NEURON_STANDIN_DEVIATE": "no_parquet"}, "summary-json", neuron_capture.UNVERSIONED, id="json"),
    ],
)
def test_explorer_summary_from_the_stand_in_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], source: str, schema: str
) -> None:
    write_capture(tmp_path / "cap", {**GOOD, "neff_2_vnc_0.neff": b"x"})
    monkeypatch.setenv("PATH", TOOLS_PATH)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    summary = explorer_summary(session_dirs(tmp_path / "cap"), timeout_s=60)
    assert summary.tags[names.TAG_NEURON_EXPLORER].endswith("neuron-explorer: ok")
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == source
    assert summary.tags[names.TAG_NEURON_EXPLORER_SCHEMA] == schema
    assert summary.metrics[names.NEURON_PROFILES] == 2
    explorer = {k.removeprefix(names.NEURON_SUMMARY_PREFIX): v for k, v in summary.metrics.items()}
    assert explorer["total_time"] == pytest.approx(0.002)  # the larger of the two profiles
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.003)
    assert explorer["mbu_estimated_percent"] == 40.0 and "profile_name" not in explorer
    assert json.loads(summary.raw) and summary.warnings == []


def test_parquet_of_an_unknown_schema_falls_back_to_summary_json_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_capture(tmp_path / "cap", GOOD)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_SCHEMA", "8.0.0")
    summary = explorer_summary(session_dirs(tmp_path / "cap"), timeout_s=60)
    why = (
        "Metadata.parquet: profile schema 8.0.0 is not one the runner reads "
        "(it reads 7.x (7.4.0: Neuron SDK 2.31), 12.x (12.0.1: Neuron SDK 2.33))"
    )
    (warning,) = summary.warnings
    assert "\n" not in warning and warning.startswith("neuron-explorer's Parquet is not read (/")
    assert warning.endswith(f"{why}): its summary-json is")
    assert "neuron-explorer: ok (Parquet not read: /" in summary.tags[names.TAG_NEURON_EXPLORER]
    assert summary.tags[names.TAG_NEURON_EXPLORER].endswith(f"{why})")
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.001)
    # a MINOR or PATCH change is compatible: read as usual
    for version, source in [("7.9.1", "parquet-7"), ("12.3.0", "parquet-12")]:
        monkeypatch.setenv("NEURON_STANDIN_EXPLORER_SCHEMA", version)
        tags = explorer_summary(session_dirs(tmp_path / "cap"), 60).tags
        assert (tags[names.TAG_NEURON_EXPLORER_SCHEMA], tags[names.TAG_NEURON_EXPLORER_SOURCE]) == (version, source)


def test_a_summary_without_total_time_is_an_unknown_schema(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"profile_schema_version": "12.0.1"}]), tmp_path / "Metadata.parquet")
    pq.write_table(pa.Table.from_pylist([{"total_duration": 0.5}]), tmp_path / "Summary.parquet")
    with pytest.raises(UnknownSchema, match=r"Summary.parquet: profile schema 12.0.1 has no Summary column total_time"):
        neuron_capture.read_parquet_summary(tmp_path)
    pq.write_table(pa.Table.from_pylist([{"total_time": 0.5, "name": "x"}]), tmp_path / "Summary.parquet")
    assert neuron_capture.read_parquet_summary(tmp_path) == (
        {"Summary.parquet#0": {"total_time": 0.5}},
        "12.0.1",
        set(),
    )


def test_summaries_in_nested_folders_are_each_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # --data-path's layout: a folder per profile, every table named alike (keyed by stem, one was lost)
    for name, seconds in (("a", 0.5), ("b", 0.25)):
        folder = tmp_path / "profiles" / "global" / f"{name}@latest"
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist([{"total_time": seconds}]), folder / "Summary.parquet")
        pq.write_table(pa.Table.from_pylist([{"profile_schema_version": "12.0.1"}]), folder / "Metadata.parquet")
    entries, _, _ = neuron_capture.read_parquet_summary(tmp_path)
    assert sorted(row["total_time"] for row in entries.values()) == [0.25, 0.5]
    write_capture(tmp_path / "cap", {**GOOD, "neff_2_vnc_0.neff": b"x"})
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_DEVIATE", "nested_summary")
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert summary.metrics[names.NEURON_PROFILES] == 2
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.003)


@pytest.mark.parametrize("unit", ["nanoseconds", "microseconds", "milliseconds", "seconds"])
def test_summary_times_are_read_in_schemafields_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit: str
) -> None:
    write_capture(tmp_path / "cap", {**GOOD, "neff_2_vnc_0.neff": b"x"})
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_TIME_UNIT", unit)  # int64 nanoseconds: 1e6 and 2e6
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "parquet-12" and summary.warnings == []
    assert summary.metrics[f"{names.NEURON_SUMMARY_PREFIX}total_time"] == pytest.approx(0.002)
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.003)
    assert summary.metrics[f"{names.NEURON_SUMMARY_PREFIX}total_active_time_percent"] == 80.0  # percent: as it is


def test_a_summary_time_in_an_unknown_unit_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_capture(tmp_path / "cap", GOOD)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_TIME_UNIT", "fortnights")
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    (warning,) = summary.warnings
    assert "\n" not in warning and "Summary.parquet: Summary field total_time is in 'fortnights', not a unit" in warning
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"  # read there instead
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.001)


def test_a_hung_parquet_view_falls_back_to_summary_json_after_its_own_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_capture(tmp_path / "cap", GOOD)
    write_capture(tmp_path / "cap2", GOOD)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER", "hang_parquet")
    monkeypatch.setattr(neuron_capture, "VIEW_TIMEOUT_S", 2)
    started = time.monotonic()
    summary = explorer_summary(session_dirs(tmp_path / "cap") + session_dirs(tmp_path / "cap2"), 60)
    assert time.monotonic() - started < 30  # one view timed out, the second session asked for summary-json only
    (warning,) = summary.warnings
    assert "\n" not in warning and "neuron-explorer view --output-format parquet did not finish in 2 s" in warning
    assert warning.endswith("(the runner's limit for a Parquet view)): its summary-json is")
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"
    assert summary.metrics[names.NEURON_PROFILES] == 2


def test_busy_time_is_summed_beside_total_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_capture(tmp_path / "cap", {**GOOD, "neff_2_vnc_0.neff": b"x"})
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_ACTIVE", "0.5")  # busy half of each profile's total_time
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_TIME_UNIT", "nanoseconds")
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert summary.metrics[names.NEURON_TOTAL_ACTIVE_TIME_SUM] == pytest.approx(0.003)
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.006)
    monkeypatch.delenv("NEURON_STANDIN_EXPLORER_ACTIVE")  # without it in every profile: no busy time
    assert names.NEURON_TOTAL_ACTIVE_TIME_SUM not in explorer_summary(session_dirs(tmp_path / "cap"), 60).metrics


def test_the_hbm_peak_is_the_devices_its_stacks_summed() -> None:
    rows = [
        {"timestamp": 0, "total_bytes": 3, "instance_id": "i", "device_idx": 0, "hbm_idx": 0},
        {"timestamp": 1, "total_bytes": 2, "instance_id": "i", "device_idx": 0, "hbm_idx": 1},
        {"timestamp": 2, "total_bytes": 1, "instance_id": "i", "device_idx": 0, "hbm_idx": 0},
        {"timestamp": 1, "total_bytes": 4, "instance_id": "i", "device_idx": 1, "hbm_idx": 0},
    ]
    # stack 0 holds 3 while stack 1 holds 2: the device's 5; another device's 4 is not added
    assert neuron_capture.device_hbm_peak(rows) == 5


def test_explorers_physical_cores_per_logical_one_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_capture(tmp_path / "cap", GOOD)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER_PHYSICAL_CORES", "1")
    assert explorer_summary(session_dirs(tmp_path / "cap"), 60).physical_cores == {1}


def test_lnc_check_names_each_source_that_disagrees_and_where_the_runners_lnc_came_from() -> None:
    trn2 = logical_nc_config("trn2", {})
    tag, warnings = lnc_check(trn2, {"NEURON_RT_VIRTUAL_CORE_SIZE": "1", "Explorer's num_physical_cores": "2"})
    assert tag == "warning: NEURON_RT_VIRTUAL_CORE_SIZE=1 disagrees with the runner's LNC 2"
    assert warnings == [
        "LNC mismatch: NEURON_RT_VIRTUAL_CORE_SIZE=1 disagrees with the runner's LNC 2 (the runner's LNC is 2, "
        "the documented trn2 default: set NEURON_LOGICAL_NC_CONFIG to the LNC the job runs at)"
    ]
    assert lnc_check(trn2, {"NEURON_RT_VIRTUAL_CORE_SIZE": "2", "x": None}) == (
        "ok: LNC 2, as NEURON_RT_VIRTUAL_CORE_SIZE give",
        [],
    )
    assert lnc_check(logical_nc_config("trn3", {}), {"x": "1"})[0].startswith("unchecked: ")


def test_without_pyarrow_summary_json_is_read_and_the_tag_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_capture(tmp_path / "cap", GOOD)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setattr(neuron_capture, "parquet_available", lambda: False)
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert summary.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"
    assert summary.tags[names.TAG_NEURON_EXPLORER].endswith("ok (Parquet not read: pyarrow is not installed)")
    assert summary.metrics[names.NEURON_TOTAL_TIME_SUM] == pytest.approx(0.001) and summary.warnings == []


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"ntrace.pb": b"x", "trace_info.pb": b"x", "trace.json": b"{}"}, id="system-only"),
        pytest.param({**GOOD, "profile_nc_0_session_0.ntff": b""}, id="empty-ntff"),
        pytest.param({k: v for k, v in GOOD.items() if not k.endswith(".neff")}, id="ntff-without-neff"),
    ],
)
def test_explorer_is_not_run_without_a_device_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes]
) -> None:
    write_capture(tmp_path / "cap", files)
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER", "fail")  # run, it would fail
    assert session_dirs(tmp_path / "cap") == []
    summary = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert summary.tags == {
        names.TAG_NEURON_EXPLORER: "not run: the capture holds no device profile (no NTFF beside its NEFF)",
        names.TAG_NEURON_EXPLORER_SOURCE: "none",
    }
    assert summary.metrics == {} and summary.warnings == []


def test_explorer_missing_or_failing_is_tagged_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_capture(tmp_path / "cap", GOOD)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert (
        explorer_summary(session_dirs(tmp_path / "cap"), 60).tags[names.TAG_NEURON_EXPLORER].startswith("not on PATH")
    )
    monkeypatch.setenv("PATH", TOOLS_PATH)
    monkeypatch.setenv("NEURON_STANDIN_EXPLORER", "fail")
    failed = explorer_summary(session_dirs(tmp_path / "cap"), 60)
    assert (
        "failed" in failed.tags[names.TAG_NEURON_EXPLORER]
        and "NTFF version 4" in failed.tags[names.TAG_NEURON_EXPLORER]
    )
    assert failed.metrics == {}


def test_budget_keeps_the_biggest_files_local(tmp_path: Path) -> None:
    for name, size in {"a.pb": 10, "sub/b.json": 20, "big.ntff": 100}.items():
        (tmp_path / "cap" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cap" / name).write_bytes(b"x" * size)
    upload, keep = split_by_budget(tmp_path / "cap", 50)
    assert [p.name for p in upload] == ["a.pb", "b.json"] and [p.name for p in keep] == ["big.ntff"]
    assert split_by_budget(tmp_path / "cap", 1000)[1] == []


def test_capture_over_budget_records_local_paths(tmp_path: Path, tracking_uri: str) -> None:
    capture = write_capture(tmp_path / "neuron_profile", GOOD).parents[1]
    tracking = TrackingConfig(uri=tracking_uri, max_artifact_mb=0)
    with open_run(tracking, "budget") as run:
        run.log_capture(capture, "neuron_profile", tracking.max_artifact_mb)
    client = mlflow.MlflowClient(tracking_uri)
    logged = client.get_run(run.run_id or "")
    assert logged.data.tags[names.TAG_ARTIFACTS_KEPT_LOCAL] == "5"
    kept = mlflow.artifacts.load_dict(f"runs:/{run.run_id}/artifacts_kept_local.json")
    assert {Path(k["path"]).name for k in kept["kept_local"]} == set(GOOD)


def test_manifest_never_takes_credentials() -> None:
    environ = {
        "NEURON_RT_VISIBLE_CORES": "0-1",
        "XLA_FLAGS": "--x",
        "TORCH_NEURONX_NEFF_CACHE_DIR": "/c",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "GITHUB_TOKEN": "t0k3n",
        "NEURON_API_TOKEN": "t0k3n2",
        "HOME": "/root",
    }
    assert allowed_environment(environ) == {
        "NEURON_RT_VISIBLE_CORES": "0-1",
        "TORCH_NEURONX_NEFF_CACHE_DIR": "/c",
        "XLA_FLAGS": "--x",
    }
