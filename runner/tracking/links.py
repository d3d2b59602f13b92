"""Links into the MLflow UI that land where a user wants to be: a run, or a comparison's runs.

The runs table opens through a shared view (MLflow's "Share" button), an experiment tag that `?viewStateShareKey=`
applies: MLflow offers a client no other way to choose the columns a user first sees.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode, urlsplit

from runner import names
from runner.secrets import redact

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

log = logging.getLogger(__name__)

LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves when given no --host/--port
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
# the comparison's key columns, first in the runs table: MLflow's column id (type.`key`) and a
# width in pixels that shows the whole value (MLflow's default width cuts a metric to ten characters)
SPEEDUP_COLUMN = f"tags.`{names.TAG_COMPARE_SPEEDUP}`"
KEY_COLUMNS = {
    f"metrics.`{names.STEP_MEDIAN_MS}`": 160,
    f"metrics.`{names.STEP_P10_MS}`": 140,
    f"metrics.`{names.STEP_P90_MS}`": 140,
    SPEEDUP_COLUMN: 240,
    f"tags.`{names.TAG_TIMING_STABLE}`": 110,
    f"tags.`{names.TAG_ACCURACY}`": 120,
    # last: the UI draws only the columns that fit its width, and these before it matter more
    f"tags.`{names.TAG_STEP_CLOCK}`": 120,
}
_SWEPT_COLUMN_WIDTH = 160  # a swept param's column, before the key columns: wide enough for a value and most names


@dataclass(frozen=True)
class Ui:
    """Where the UI for a tracking URI is served, and how to start it when nothing serves it yet."""

    base: str
    start: str  # the command that serves a local store's UI; empty for a tracking server, which serves its own


def ui_for(tracking_uri: str) -> Ui:
    """The UI of a tracking URI: a server's own address without credentials or query, else `mlflow ui` here."""
    parts = urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return Ui(LOCAL_UI, f"mlflow ui --backend-store-uri {shlex.quote(redact(tracking_uri))}")
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return Ui(f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}", "")


def run_page(ui: Ui, experiment_id: str, run_id: str) -> str:
    """The run's own page."""
    return f"{ui.base}/#/experiments/{experiment_id}/runs/{run_id}"


def compare_page(ui: Ui, experiment_ids: list[str], run_ids: list[str]) -> str:
    """MLflow's compare view of the runs; it finds them only in the experiments the link names (sorted, as the UI's)."""
    runs, experiments = quote(json.dumps(run_ids)), quote(json.dumps(experiment_ids))
    return f"{ui.base}/#/compare-runs?runs={runs}&experiments={experiments}"


def swept_columns(keys: list[str], runs: list[Run]) -> list[str]:
    """The runs table's columns of a sweep's swept keys: the param each sets.

    A swept config group (`measure=quick,stable`) sets no param: the workload's option name stands for the
    workload, and another group's params that differ between the runs for that group.
    """
    found: list[str] = []
    for key in keys:
        if key == "workload":
            found.append(names.PARAM_WORKLOAD_OPTION)
        elif any(key in run.data.params for run in runs):
            found.append(key)
        else:
            group = sorted({param for run in runs for param in run.data.params if param.startswith(f"{key}.")})
            found += [param for param in group if len({run.data.params.get(param) for run in runs}) > 1]
    return [f"params.`{param}`" for param in dict.fromkeys(found)]


def _runs_table_page(
    ui: Ui,
    client: MlflowClient,
    experiment_ids: list[str],
    search_filter: str,
    first_columns: list[str],
    key_columns: dict[str, int],
) -> str:
    """The experiments' runs table of the runs `search_filter` finds, fastest first, `first_columns` then `key_columns`.

    The view's tag is named after its contents (the same comparison, the same link) and set on every experiment
    (the UI reads the first one the link names). Where the store refuses it (a read-only user, a filter too long),
    the link carries the filter and order itself, and the table shows the user's own columns.
    """
    from mlflow.exceptions import MlflowException

    order = {"searchFilter": search_filter, "orderByKey": f"metrics.`{names.STEP_MEDIAN_MS}`", "orderByAsc": True}
    widths = {**dict.fromkeys(first_columns, _SWEPT_COLUMN_WIDTH), **key_columns}
    # MLflow applies the widths only to the columns it orders
    view = {**order, "selectedColumns": list(widths), "columnOrder": list(widths), "columnWidths": widths}
    key = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:16]
    if len(experiment_ids) == 1:
        page, experiments = f"{ui.base}/#/experiments/{experiment_ids[0]}/runs", {}
    else:
        page, experiments = f"{ui.base}/#/compare-experiments/s", {"experiments": json.dumps(experiment_ids)}
    try:
        for experiment_id in experiment_ids:
            client.set_experiment_tag(experiment_id, SHARED_VIEW_TAG_PREFIX + key, json.dumps(view))
    except MlflowException as err:
        log.warning("the runs table's columns could not be stored (%s); the link sets its filter only", err.message)
        return f"{page}?{urlencode({**experiments, **order, 'orderByAsc': 'true'})}"  # the UI reads lowercase
    return f"{page}?{urlencode({**experiments, 'viewStateShareKey': key})}"


def comparison_links(
    ui: Ui, client: MlflowClient, runs: list[Run], first_columns: list[str], speedup: bool = True
) -> dict[str, str]:
    """The runs table and the compare view of a comparison's runs, `first_columns` first in the table.

    Filtered on the runs' ids, not a sweep's parent: a sweep reuses runs of earlier sweeps, other parents' children.
    Without `speedup` the table leaves out the speedup column: the runs' tags hold another comparison's.
    """
    key_columns = {column: width for column, width in KEY_COLUMNS.items() if speedup or column != SPEEDUP_COLUMN}
    run_ids = [run.info.run_id for run in runs]
    experiment_ids = sorted({run.info.experiment_id for run in runs})
    search_filter = "attributes.run_id IN (" + ", ".join(f"'{run_id}'" for run_id in run_ids) + ")"
    return {
        names.TAG_UI_RUNS_TABLE: _runs_table_page(
            ui, client, experiment_ids, search_filter, first_columns, key_columns
        ),
        names.TAG_UI_COMPARE: compare_page(ui, experiment_ids, run_ids),
    }


def describe_links(ui: Ui, links: dict[str, str]) -> str:
    """The links as the terminal shows them, with how to start the UI when it is a local store's."""
    start = f" (start it: {ui.start})" if ui.start else ""
    runs_table, compare = links[names.TAG_UI_RUNS_TABLE], links[names.TAG_UI_COMPARE]
    return f"open the comparison in the MLflow UI{start}:\n  runs table:   {runs_table}\n  compare view: {compare}"
