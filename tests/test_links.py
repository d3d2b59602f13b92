"""Links into the MLflow UI: where they point, what the runs-table view stores, and its fallback."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from runner import names
from runner.report.links import KEY_COLUMNS, LOCAL_UI, SHARED_VIEW_TAG_PREFIX, comparison_links, ui_for


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


def test_a_sweeps_runs_table_is_a_shared_view_of_its_jobs(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("links")
    ui = ui_for(tracking_uri)
    links = comparison_links(ui, client, experiment, ["r1", "r2"], "parent1")
    key = parse_qs(urlsplit(links[names.TAG_UI_RUNS_TABLE]).fragment.split("?", 1)[1])["viewStateShareKey"][0]
    view = json.loads(client.get_experiment(experiment).tags[SHARED_VIEW_TAG_PREFIX + key])
    assert view["searchFilter"] == "tags.`mlflow.parentRunId` = 'parent1'"
    assert view["orderByKey"] == f"metrics.`{names.STEP_MEDIAN_MS}`" and view["orderByAsc"] is True
    assert view["selectedColumns"] == list(KEY_COLUMNS) == view["columnOrder"]
    assert f"metrics.`{names.STEP_MEDIAN_MS}`" in view["columnWidths"]
    # the same comparison gets the same link; chosen runs are filtered by id
    assert comparison_links(ui, client, experiment, ["r1", "r2"], "parent1") == links
    chosen = comparison_links(ui, client, experiment, ["r1", "r2"], None)
    chosen_key = chosen[names.TAG_UI_RUNS_TABLE].rsplit("=", 1)[1]
    chosen_view = json.loads(client.get_experiment(experiment).tags[SHARED_VIEW_TAG_PREFIX + chosen_key])
    assert chosen_view["searchFilter"] == "attributes.run_id IN ('r1', 'r2')"
    assert chosen[names.TAG_UI_COMPARE] == (
        f"{LOCAL_UI}/#/compare-runs?runs=%5B%22r1%22%2C%20%22r2%22%5D&experiments=%5B%22{experiment}%22%5D"
    )


def test_a_store_that_refuses_the_view_still_gets_a_filtered_link(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("read only")

    def refuse(*args: object) -> None:
        raise MlflowException("Permission denied")

    monkeypatch.setattr(client, "set_experiment_tag", refuse)
    link = comparison_links(ui_for(tracking_uri), client, experiment, ["r1"], "parent1")[names.TAG_UI_RUNS_TABLE]
    query = parse_qs(urlsplit(link).fragment.split("?", 1)[1])
    assert query == {
        "searchFilter": ["tags.`mlflow.parentRunId` = 'parent1'"],
        "orderByKey": [f"metrics.`{names.STEP_MEDIAN_MS}`"],
        "orderByAsc": ["true"],
    }
