"""Trace diff: two runs' step trees aligned by structure, tested over cycles, drawn for Perfetto.

The traces under tests/helpers/data/traces are real CPU runs of RMSNorm at hidden=64, seq_len=8,
`schedule=repeat schedule.active=1` (five cycles of one step), without memory and shapes
recording to keep them small: naive, builtin, compiled, and naive in train_step mode.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import mlflow
import pytest

from runner import compare, names
from runner.measure.traces import Profile, load_profile
from runner.report.trace_diff import (
    ADDED,
    BLOCKS_TRACK,
    MATCHED,
    REMOVED,
    REPLACED,
    diff_profiles,
    perfetto_trace,
    render_tree,
)
from tests.helpers import TRACES

NAIVE_OPS = ["aten::mul", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::mul"]


def profile(name: str) -> Profile:
    return load_profile(sorted((TRACES / name).glob("*/trace.json")))


def labels(nodes: list) -> list[str]:
    return [node.label for node in nodes]


def test_a_run_merges_its_cycles_into_one_step_tree() -> None:
    naive = profile("naive")
    assert naive.cycles == 5 and len(naive.steps) == 5
    assert naive.root.label == "ProfilerStep"
    assert labels(naive.root.children) == NAIVE_OPS
    assert all(len(node.cycle_us) == 5 and min(node.cycle_us) > 0 for node in naive.root.children)
    # a parent's time holds its children's
    mean = naive.root.children[1]
    assert mean.median_us >= sum(child.median_us for child in mean.children)


def test_naive_against_builtin_is_the_op_by_op_subtree_replaced_by_rms_norm() -> None:
    root = diff_profiles(profile("naive"), profile("builtin"))
    assert root.kind == MATCHED and root.title == "ProfilerStep"
    (block,) = root.children
    assert block.kind == REPLACED
    assert labels(block.before) == NAIVE_OPS and labels(block.after) == ["aten::rms_norm"]
    # the builtin op keeps its CPU decomposition below it
    rms_norm = next(member for member in block.children if member.kind == ADDED)
    assert "aten::_fused_rms_norm" in [node.title for node in rms_norm.walk()]
    assert sorted(m.kind for m in block.children) == [ADDED] + [REMOVED] * 6
    # five cycles a side: every node is tested, and q-values are never below p-values
    assert all(n.p_value is not None and n.q_value is not None and n.q_value >= n.p_value for n in root.walk())


def test_eager_against_compiled_is_the_subtree_replaced_by_the_compiled_region() -> None:
    root = diff_profiles(profile("naive"), profile("compiled"))
    (block,) = root.children
    assert block.kind == REPLACED and labels(block.before) == NAIVE_OPS
    assert "Torch-Compiled Region: 0/0" in labels(block.after)
    region = next(m for m in block.children if m.title == "Torch-Compiled Region: 0/0")
    # the compiled graph's call keeps its place, its hash left out of the label
    assert "## Call CompiledFxGraph <hash> ##" in [node.title for node in region.walk()]


def test_forward_against_train_step_matches_the_forward_and_adds_backward_and_optimizer() -> None:
    root = diff_profiles(profile("naive"), profile("train_step"))
    matched = [child for child in root.children if child.kind == MATCHED]
    assert [child.title for child in matched] == NAIVE_OPS  # the forward, op for op, in order
    added = [node.title for child in root.children if child.kind != MATCHED for node in child.walk()]
    assert any(title.startswith("Optimizer.step#") for title in added)
    assert any(title.startswith("Optimizer.zero_grad#") for title in added)
    assert sum(title.startswith("autograd::engine::evaluate_function:") for title in added) >= 5
    assert all(child.kind in (MATCHED, ADDED) for child in root.children)  # nothing of the forward lost


def test_a_run_against_itself_changes_nothing_and_one_cycle_cannot_be_tested() -> None:
    naive = profile("naive")
    root = diff_profiles(naive, naive)
    assert all(node.kind == MATCHED and node.delta == 0 for node in root.walk())
    assert all(node.q_value == 1.0 for node in root.walk())
    single = load_profile(sorted((TRACES / "naive").glob("*/trace.json"))[:1])
    untested = diff_profiles(single, profile("builtin"))
    assert all(node.p_value is None for node in untested.walk())
    assert " n/a  = ProfilerStep" in render_tree(untested, 0)


def test_the_tree_prints_the_largest_change_first_and_stops_at_its_depth() -> None:
    tree = render_tree(diff_profiles(profile("naive"), profile("train_step")), depth=1).splitlines()
    rows, column = tree[1:], tree[0].index("subtree")
    assert rows[0][column:] == "= ProfilerStep"
    assert all(row[column:].startswith(("  = ", "  ~ ", "  + ", "  - ")) for row in rows[1:])  # one level down
    deltas = [abs(float(row.split()[2])) for row in rows[1:]]
    assert deltas == sorted(deltas, reverse=True)
    assert not any(row.endswith("aten::sum") for row in rows)  # two levels down: below the depth


def _slices(trace: dict) -> dict[tuple[int, int], list[dict]]:
    by_track = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            by_track[event["pid"], event["tid"]].append(event)
    return by_track


def test_the_perfetto_file_draws_one_step_of_each_run_with_the_matches_labelled() -> None:
    before, after = profile("naive"), profile("compiled")
    root = diff_profiles(before, after)
    trace = perfetto_trace(root, before, after, ("before: naive", "after: compiled"))
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {1: "before: naive", 2: "after: compiled"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for (pid, tid), slices in _slices(trace).items():  # every track nests: no slice half inside another
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list[float] = []
        for event in slices:
            while open_ends and event["ts"] >= open_ends[-1]:
                open_ends.pop()
            assert not open_ends or event["ts"] + event["dur"] <= open_ends[-1], (pid, tid, event["name"])
            open_ends.append(event["ts"] + event["dur"])
        if tracks[pid, tid] != BLOCKS_TRACK:
            steps = [e for e in slices if e["name"].startswith("ProfilerStep#")]
            assert len(steps) == 1 and steps[0]["ts"] == 0  # one step, drawn from zero
    (block,) = root.children
    block_slices = [e for e in events if e["ph"] == "X" and e["name"].startswith(f"#{block.number} replaced")]
    assert sorted(e["pid"] for e in block_slices) == [1, 2]
    assert all(tracks[e["pid"], e["tid"]] == BLOCKS_TRACK for e in block_slices)
    naive_mul = next(e for e in events if e["ph"] == "X" and e["pid"] == 1 and e["name"] == "aten::mul")
    assert naive_mul["args"]["diff"] == "only before"
    # flows: one start in the before process and one end in the after process per matched pair or block
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and {root.number, block.number} <= starts.keys()
    assert all(starts[i]["pid"] == 1 and ends[i]["pid"] == 2 and ends[i]["bp"] == "e" for i in starts)


def runner_experiment(artifacts: Path) -> None:
    """The runner's experiment as the active one, its artifacts in `artifacts`: without a location, ./mlruns of the
    checkout."""
    mlflow.set_experiment(experiment_id=mlflow.create_experiment("runner", artifact_location=artifacts.as_uri()))


def log_traces(name: str, trace_dir: Path | None) -> str:
    with mlflow.start_run(run_name=name) as run:
        if trace_dir is not None:
            mlflow.log_artifacts(str(trace_dir), names.TRACE_FOLDER)
        mlflow.log_dict({"columns": [], "data": []}, names.OP_TABLE_FILE)  # JSON that is not a trace
    return run.info.run_id


def named_as_now(trace_dir: Path, copy: Path) -> Path:
    """A copy of recorded traces named as the runner names them now; tests/helpers/data keeps older runs' trace.json."""
    for trace in trace_dir.glob("*/trace.json"):
        (copy / trace.parent.name).mkdir(parents=True)
        shutil.copy(trace, copy / trace.parent.name / names.TRACE_FILE)
    return copy


def test_compare_diff_prints_the_tree_and_logs_it_to_the_newer_run(
    tracking_uri: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runner_experiment(tmp_path / "artifacts")
    naive = log_traces("naive", TRACES / "naive")  # an older run's trace/iteration_N/trace.json
    builtin = log_traces("builtin", named_as_now(TRACES / "builtin", tmp_path / "builtin"))
    assert compare.main(["--diff", naive[:8], builtin, "--depth", "1"]) == 0
    out = capsys.readouterr()
    assert "~ replaced [3x aten::mul, aten::mean, aten::add, ... (6 spans)] by [aten::rms_norm]" in out.out
    assert "(5 before, 5 after)" in out.out
    folder = f"{names.TRACE_DIFF_FOLDER}/{naive[:8]}_to_{builtin[:8]}"
    assert folder in out.err
    client = mlflow.MlflowClient()
    logged = {info.path for info in client.list_artifacts(builtin, folder)}
    assert logged == {f"{folder}/diff.md", f"{folder}/diff.json", f"{folder}/perfetto.json"}
    assert not client.list_artifacts(naive, names.TRACE_DIFF_FOLDER)
    diff = json.loads(Path(client.download_artifacts(builtin, f"{folder}/diff.json")).read_text())
    assert diff["title"] == "ProfilerStep" and diff["children"][0]["kind"] == REPLACED
    # diffing again reads the runs' traces only, not the diff logged beside them
    assert compare.main(["--diff", builtin, naive, "--depth", "0"]) == 0
    assert "(5 before, 5 after)" in capsys.readouterr().out
