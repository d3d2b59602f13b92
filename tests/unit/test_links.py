"""Links into the MLflow UI: where they point, what the runs-table view stores, and its fallback."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import mlflow
import pytest
from mlflow.entities import Param, Run, RunData, RunInfo
from mlflow.exceptions import MlflowException

from runner import names
from runner.report.reader import sweep_children
from runner.report.sweep_report import ui_links
from runner.report.table import SPEEDUP
from runner.tracking.links import (
    KEY_COLUMNS,
    LOCAL_UI,
    SHARED_VIEW_TAG_PREFIX,
    SPEEDUP_COLUMN,
    comparison_links,
    swept_columns,
    ui_for,
)
from tests.helpers import REPO


@pytest.mark.parametrize(
    ("uri", "base"),
    [
        ("http://alice:s3cret@mlflow.internal:5000/", "http://mlflow.internal:5000"),
        ("https://token@host/mlflow?token=abc#x", "https://host/mlflow"),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ],
)
def test_a_servers_links_are_its_own_address_without_credentials(uri: str, base: str) -> None:
    ui = ui_for(uri)
    assert ui.base == base and ui.start == ""


def test_a_local_stores_links_go_to_mlflow_ui_with_how_to_start_it() -> None:
    ui = ui_for("sqlite:////data/mlflow.db")
    assert ui.base == LOCAL_UI and ui.start == "mlflow ui --backend-store-uri sqlite:////data/mlflow.db"


def test_the_command_that_starts_the_ui_keeps_a_store_path_with_a_space_whole(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'my runs' / 'mlflow.db'}"
    assert shlex.split(ui_for(uri).start) == ["mlflow", "ui", "--backend-store-uri", uri]


def stored_view(client: mlflow.MlflowClient, experiment: str, link: str) -> dict[str, object]:
    """The shared view a runs-table link applies."""
    key = link_query(link)["viewStateShareKey"][0]
    view: dict[str, object] = json.loads(client.get_experiment(experiment).tags[SHARED_VIEW_TAG_PREFIX + key])
    return view


def runs_in(client: mlflow.MlflowClient, experiment: str, count: int) -> list[Run]:
    """`count` finished runs of the experiment, oldest first."""
    run_ids = [client.create_run(experiment).info.run_id for _ in range(count)]
    for run_id in run_ids:
        client.set_terminated(run_id)
    return [client.get_run(run_id) for run_id in run_ids]


def link_query(link: str) -> dict[str, list[str]]:
    """The query of a link into the UI, which MLflow's router reads after the fragment's `?`."""
    return parse_qs(urlsplit(link).fragment.split("?", 1)[1])


def test_a_comparisons_runs_table_is_a_shared_view_of_its_runs(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("links")
    runs = runs_in(client, experiment, 2)
    r1, r2 = (run.info.run_id for run in runs)
    ui = ui_for(tracking_uri)
    links = comparison_links(ui, client, runs, [])
    assert links[names.TAG_UI_RUNS_TABLE].startswith(f"{LOCAL_UI}/#/experiments/{experiment}/runs?")
    view = stored_view(client, experiment, links[names.TAG_UI_RUNS_TABLE])
    assert view["searchFilter"] == f"attributes.run_id IN ('{r1}', '{r2}')"
    assert view["orderByKey"] == f"metrics.`{names.STEP_MEDIAN_MS}`" and view["orderByAsc"] is True
    assert view["selectedColumns"] == list(KEY_COLUMNS) == view["columnOrder"]
    assert f"metrics.`{names.STEP_MEDIAN_MS}`" in view["columnWidths"]  # type: ignore[operator]
    # the same comparison gets the same link, another column set another
    assert comparison_links(ui, client, runs, []) == links
    swept = comparison_links(ui, client, runs, ["params.`measure.copies`"])
    assert swept[names.TAG_UI_RUNS_TABLE] != links[names.TAG_UI_RUNS_TABLE]
    assert links[names.TAG_UI_COMPARE] == (
        f"{LOCAL_UI}/#/compare-runs?runs=%5B%22{r1}%22%2C%20%22{r2}%22%5D&experiments=%5B%22{experiment}%22%5D"
    )


def test_the_links_of_runs_of_two_experiments_name_both_experiments(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiments = sorted(client.create_experiment(name) for name in ("before", "after"))
    runs = [run for experiment in reversed(experiments) for run in runs_in(client, experiment, 1)]
    links = comparison_links(ui_for(tracking_uri), client, runs, [])
    compare = link_query(links[names.TAG_UI_COMPARE])
    # as MLflow's own runs table links its compare view: every run, and its runs' experiments, sorted
    assert json.loads(compare["runs"][0]) == [run.info.run_id for run in runs]
    assert json.loads(compare["experiments"][0]) == experiments
    table = links[names.TAG_UI_RUNS_TABLE]
    assert table.startswith(f"{LOCAL_UI}/#/compare-experiments/s?")
    assert json.loads(link_query(table)["experiments"][0]) == experiments
    # the UI reads the shared view from the first experiment the link names; each holds it
    views = [stored_view(client, experiment, table) for experiment in experiments]
    assert views[0] == views[1]
    shown = {run.info.run_id for run in client.search_runs(experiments, str(views[0]["searchFilter"]))}
    assert shown == {run.info.run_id for run in runs}


def test_a_store_that_refuses_the_view_still_gets_a_filtered_link(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("read only")

    def refuse(*args: object) -> None:
        raise MlflowException("Permission denied")

    monkeypatch.setattr(client, "set_experiment_tag", refuse)
    runs = runs_in(client, experiment, 1)
    link = comparison_links(ui_for(tracking_uri), client, runs, [])[names.TAG_UI_RUNS_TABLE]
    assert link_query(link) == {
        "searchFilter": [f"attributes.run_id IN ('{runs[0].info.run_id}')"],
        "orderByKey": [f"metrics.`{names.STEP_MEDIAN_MS}`"],
        "orderByAsc": ["true"],
    }


def job_run(client: mlflow.MlflowClient, experiment: str, parent: str, params: dict[str, str]) -> str:
    run = client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id
    for key, value in params.items():
        client.log_param(run, key, value)
    client.set_terminated(run)
    return str(run)


def test_a_sweeps_runs_table_shows_the_runs_it_reused_and_its_swept_keys_first(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("study")
    earlier = client.create_run(experiment, tags={names.TAG_SWEEP: "true"}).info.run_id
    reused = job_run(client, experiment, earlier, {"measure.copies": "1"})
    study = client.create_run(experiment, tags={names.TAG_SWEEP: "true"}).info.run_id
    ran = [job_run(client, experiment, study, {"measure.copies": str(k)}) for k in (2, 4)]
    client.set_tag(study, names.TAG_REUSED_RUNS, reused)
    client.set_tag(study, names.TAG_SWEPT_KEYS, "measure.copies")
    parent = client.get_run(study)
    rows = sweep_children(client, experiment, parent)
    ui_links(client, rows, parent)
    view = stored_view(client, experiment, client.get_run(study).data.tags[names.TAG_UI_RUNS_TABLE])
    # what the UI's table finds with the view's filter: every row of the comparison, the reused run too
    shown = {run.info.run_id for run in client.search_runs([experiment], str(view["searchFilter"]))}
    assert shown == {reused, *ran} == {run.info.run_id for run in rows}
    assert view["columnOrder"] == ["params.`measure.copies`", *KEY_COLUMNS] == view["selectedColumns"]


def test_a_comparison_against_another_baseline_leaves_the_runs_speedups_out(tracking_uri: str) -> None:
    # the runs carry their sweep's speedups against compiled; `compare --baseline naive` prints others
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("rebased")
    naive, compiled = runs_in(client, experiment, 2)
    for run, speedup in ((naive, "0.60x"), (compiled, "baseline")):
        client.set_tag(run.info.run_id, names.TAG_COMPARE_SPEEDUP, speedup)
        client.set_tag(run.info.run_id, names.TAG_COMPARE_BASELINE, "rmsnorm_compiled")
    runs = [client.get_run(run.info.run_id) for run in (naive, compiled)]
    theirs = [{"run id": naive.info.run_id, SPEEDUP: "0.60x"}, {"run id": compiled.info.run_id, SPEEDUP: "baseline"}]
    text = ui_links(client, runs, None, theirs)
    view = stored_view(client, experiment, text.split("runs table:")[1].split()[0])
    assert SPEEDUP_COLUMN in view["selectedColumns"]  # type: ignore[operator]
    assert "leaves out" not in text
    rebased = [{"run id": naive.info.run_id, SPEEDUP: "baseline"}, {"run id": compiled.info.run_id, SPEEDUP: "1.67x"}]
    text = ui_links(client, runs, None, rebased)
    view = stored_view(client, experiment, text.split("runs table:")[1].split()[0])
    assert SPEEDUP_COLUMN not in view["selectedColumns"]  # type: ignore[operator]
    assert view["selectedColumns"] == [column for column in KEY_COLUMNS if column != SPEEDUP_COLUMN]
    assert text.endswith(
        f"(the runs table leaves out {names.TAG_COMPARE_SPEEDUP}: the runs carry other speedups "
        "(their last sweep's, against rmsnorm_compiled), not these)"
    )


def test_a_swept_group_shows_its_params_that_differ() -> None:
    def run(params: dict[str, str]) -> Run:
        return Run(
            RunInfo("r", "e", "u", "FINISHED", 0, 1, "active"), RunData(params=[Param(k, v) for k, v in params.items()])
        )

    quick = run({"measure.steps": "20", "measure.repeats": "1", "workload._option_": "a", "workload.hidden": "16"})
    stable = run({"measure.steps": "200", "measure.repeats": "1", "workload._option_": "b", "workload.hidden": "32"})
    columns = swept_columns(["measure", "workload", "workload.hidden"], [quick, stable])
    assert columns == ["params.`measure.steps`", f"params.`{names.PARAM_WORKLOAD_OPTION}`", "params.`workload.hidden`"]


def test_the_filter_the_docs_show_for_slash_named_metrics_finds_the_runs_it_says(tracking_uri: str) -> None:
    (search,) = [
        line for line in (REPO / "docs" / "comparing.md").read_text().splitlines() if line.startswith("metrics.")
    ]
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("search")
    runs = {}
    for name, kind, option, median in [
        ("fast job", names.KIND_JOB, "rmsnorm_naive", 0.5),
        ("slow job", names.KIND_JOB, "rmsnorm_naive", 2.0),
        ("other workload", names.KIND_JOB, "rmsnorm_builtin", 0.5),
        ("a history", names.KIND_HISTORY, "rmsnorm_naive", 0.5),
    ]:
        run_id = client.create_run(experiment, run_name=name, tags={names.TAG_KIND: kind}).info.run_id
        client.log_param(run_id, names.PARAM_WORKLOAD_OPTION, option)
        client.log_metric(run_id, names.STEP_MEDIAN_MS, median)
        runs[name] = run_id
    assert [run.info.run_id for run in client.search_runs([experiment], search)] == [runs["fast job"]]
    with pytest.raises(MlflowException, match="Invalid comparison clause"):  # what the docs say a bare name gets
        client.search_runs([experiment], search.replace(f"`{names.STEP_MEDIAN_MS}`", names.STEP_MEDIAN_MS))
