"""MLflow, in one place: the experiment, a run's params, tags, metrics, artifacts (`runner.job.open_run` opens it)."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import time
from collections.abc import Callable
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from runner import names
from runner.config import TrackingConfig
from runner.secrets import redact
from runner.signals import signals_held
from runner.tracking.store import SQLITE_FULL, StoreFull, mlflow_client, prepare_store, sqlite_path, store_lock

if TYPE_CHECKING:  # the result module loads torch; tracking is also used where torch is not needed
    from runner.measure.result import JobResult, SystemSample

log = logging.getLogger(__name__)

PARENT_RUN_ENV = "RUNNER_PARENT_RUN_ID"  # the sweep callback's parent run id, for its jobs (in-process or spawned)
_MAX_PARAM_CHARS = 6000  # MLflow caps param values at 6000 characters; longer values are cut, not rejected
_EXPERIMENT_KIND_TAG, _EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
_MAX_BATCH_METRICS = 1000  # MLflow refuses a log_batch of more metrics than this
LOCKED_RETRIES = 12  # parallel jobs share one SQLite file; a writer that finds it locked waits and tries again
T = TypeVar("T")


# MLflow logs each failed write to a full store at ERROR with two tracebacks: a few hundred lines before the
# runner's one (mlflow_write raises StoreFull instead; the job's error.txt keeps the traceback)
logging.getLogger("mlflow.store.db.utils").addFilter(lambda record: SQLITE_FULL not in record.getMessage())


def mlflow_write(call: Callable[[], T]) -> T:
    """Run an MLflow write whole (SIGINT/SIGTERM wait), retrying a locked SQLite store.

    A stop raised inside SQLAlchemy would leave the connection mid-transaction: the run could not even be closed KILLED.
    """
    for attempt in range(LOCKED_RETRIES):
        try:
            with signals_held():
                return call()
        except Exception as err:
            if SQLITE_FULL in str(err):
                raise StoreFull(f"the MLflow store's disk is full ({SQLITE_FULL}): free space where it lives") from err
            if "database is locked" not in str(err) or attempt == LOCKED_RETRIES - 1:
                raise
            delay = min(0.05 * 2**attempt, 5.0) * random.uniform(0.5, 1.5)
            log.debug("MLflow store locked; retrying in %.2f s", delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def run_status(uri: str, run_id: str) -> str | None:
    """The status the store shows for a run, read back (a full SQLite store still reads); None if unreadable."""
    try:
        return str(mlflow_client(uri).get_run(run_id).info.status)
    except Exception as err:  # only a message depends on it
        log.debug("could not read run %s back: %s", run_id, err)
        return None


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts/lists into dotted keys, as the MLflow params table wants."""
    if isinstance(tree, list) and any(isinstance(v, (dict, list)) for v in tree):
        tree = dict(enumerate(tree))
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def git_commit(repo: Path) -> str | None:
    """The commit of the repository holding `repo`, with '-dirty' when it has changes."""
    git = ["git", "-C", str(repo)]
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        status = [*git, "status", "--porcelain", "--untracked-files=no"]
        dirty = subprocess.run(status, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{commit}-dirty" if dirty else commit


def split_by_budget(local_dir: Path, max_bytes: int) -> tuple[list[Path], list[Path]]:
    """Files to upload, and those past the budget: smallest first, so one huge NTFF stays local, not many traces."""
    files = sorted((p for p in local_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    fits = sum(1 for used in accumulate(p.stat().st_size for p in files) if used <= max_bytes)
    return files[:fits], files[fits:]


def ensure_experiment(tracking: TrackingConfig) -> str:
    """Point MLflow at `tracking.uri` and return the id of `tracking.experiment`, creating it."""
    import mlflow

    prepare_store(tracking.uri)
    # MLflow prints a server's run links with the URI as given, password included; the runner prints its own, masked
    os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    mlflow.set_tracking_uri(tracking.uri)
    with store_lock(tracking.uri):  # two first jobs would both try to create the experiment
        database = sqlite_path(tracking.uri)
        if database is not None and mlflow.get_experiment_by_name(tracking.experiment) is None:
            # else MLflow puts a SQLite store's artifacts in ./mlruns of the first job's folder, not beside it
            root = (database.resolve().parent / "mlruns").as_uri()
            mlflow_write(lambda: mlflow.create_experiment(tracking.experiment, artifact_location=root))
        experiment = mlflow_write(lambda: mlflow.set_experiment(tracking.experiment))
    # MLflow 3's UI opens GenAI views unless told the runs are training-style; set once, not by every parallel job
    if experiment.tags.get(_EXPERIMENT_KIND_TAG) != _EXPERIMENT_KIND:
        client = mlflow_client(tracking)
        mlflow_write(
            lambda: client.set_experiment_tag(experiment.experiment_id, _EXPERIMENT_KIND_TAG, _EXPERIMENT_KIND)
        )
    return str(experiment.experiment_id)


class NullRun:
    """Accepts everything a run accepts and records nothing (tracking.enabled=false)."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None:
        """Ignore params."""

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Ignore tags."""

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Ignore metrics."""

    def log_series(self, series: dict[str, list[float]]) -> None:
        """Ignore metric histories."""

    def log_samples(self, samples: list[SystemSample], prefix: str = "") -> None:
        """Ignore system samples."""

    def log_table(self, columns: dict[str, list[Any]], artifact_file: str) -> None:
        """Ignore a table."""

    def log_text(self, text: str, artifact_file: str) -> None:
        """Ignore a text artifact."""

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None:
        """Ignore a directory of artifacts."""

    def log_capture(self, local_dir: Path, artifact_path: str, max_mb: int) -> None:
        """Ignore a capture directory."""

    def log_result(self, result: JobResult, max_artifact_mb: int, folder: str = "") -> None:
        """Log a job's result: metrics, tags, the op table, text artifacts, the capture and memory folders.

        Another rank's (`folder`="rank1") goes under `rank1/`; the run's tags and series stay the job's own.
        """
        prefix = f"{folder}/" if folder else ""
        self.log_metrics({prefix + name: value for name, value in result.metrics.items()})
        if not folder:
            self.log_series(result.series)
            self.set_tags({**result.tags, names.TAG_OP_TABLE_VERSION: names.OP_TABLE_VERSION})
        self.log_samples(result.system, prefix)
        for name, columns in {names.OP_TABLE_FILE: result.table.columns(), **result.tables}.items():
            self.log_table(columns, prefix + name)
        for name, text in {names.OP_TABLE_TEXT_FILE: result.printed_table, **result.texts}.items():
            self.log_text(text, prefix + name)
        self.log_capture(result.capture_dir, prefix + result.capture_dir.name, max_artifact_mb)
        if result.memory_dir is not None:
            self.log_capture(result.memory_dir, prefix + names.MEMORY_FOLDER, max_artifact_mb)

    def describe(self) -> str:
        """One line for the console summary."""
        return "tracking is off (tracking=off): nothing was logged to MLflow"


class MlflowRun(NullRun):
    """The active MLflow run of this job."""

    def __init__(self, run_id: str, experiment_id: str, tracking: TrackingConfig) -> None:
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.tracking = tracking

    def log_params(self, params: dict[str, Any]) -> None:
        """Log params, cutting values MLflow would reject for length."""
        import mlflow

        mlflow_write(lambda: mlflow.log_params({k: str(v)[:_MAX_PARAM_CHARS] for k, v in params.items()}))

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Set tags; None values are skipped rather than logged as 'None'."""
        import mlflow

        mlflow_write(lambda: mlflow.set_tags({k: str(v) for k, v in tags.items() if v is not None}))

    def log_metrics(self, metrics: dict[str, float]) -> None:
        """Log metrics at step 0."""
        import mlflow

        mlflow_write(lambda: mlflow.log_metrics(metrics))

    def log_series(self, series: dict[str, list[float]]) -> None:
        """Log each list as one metric's history, one step per value, in one write."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, step) for key, values in series.items() for step, value in enumerate(values)]
        if batch:
            mlflow_write(lambda: mlflow_client(self.tracking).log_batch(str(self.run_id), metrics=batch))

    def log_samples(self, samples: list[SystemSample], prefix: str = "") -> None:
        """Log system samples as metric histories: step = the sample's index, timestamp = when it was read."""
        from mlflow.entities import Metric

        batch = [
            Metric(prefix + key, value, int(sample.time_s * 1000), step)
            for step, sample in enumerate(samples)
            for key, value in sample.values.items()
        ]
        client = mlflow_client(self.tracking)
        for start in range(0, len(batch), _MAX_BATCH_METRICS):
            mlflow_write(partial(client.log_batch, str(self.run_id), metrics=batch[start : start + _MAX_BATCH_METRICS]))

    def log_table(self, columns: dict[str, list[Any]], artifact_file: str) -> None:
        """Log a table the MLflow UI can show (a JSON artifact)."""
        import mlflow

        mlflow_write(lambda: mlflow.log_table(data=columns, artifact_file=artifact_file))

    def log_text(self, text: str, artifact_file: str) -> None:
        """Log a text artifact."""
        import mlflow

        mlflow_write(lambda: mlflow.log_text(text, artifact_file))

    def log_artifacts(self, local_dir: Path, artifact_path: str) -> None:
        """Log a directory tree, when it exists."""
        import mlflow

        if local_dir.is_dir():
            mlflow_write(lambda: mlflow.log_artifacts(str(local_dir), artifact_path))

    def log_capture(self, local_dir: Path, artifact_path: str, max_mb: int) -> None:
        """Log a capture tree; files past `max_mb` stay local, listed in `names.KEPT_LOCAL_FILE`, counted in a tag."""
        import mlflow

        if not local_dir.is_dir():
            return
        upload, keep = split_by_budget(local_dir, max_mb * 2**20)
        if not keep:
            mlflow_write(lambda: mlflow.log_artifacts(str(local_dir), artifact_path))
            return
        for path in upload:
            folder = str(Path(artifact_path) / path.parent.relative_to(local_dir))
            mlflow_write(partial(mlflow.log_artifact, str(path), folder))
        kept = [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in keep]
        mlflow_write(lambda: mlflow.log_dict({"max_mb": max_mb, "kept_local": kept}, names.KEPT_LOCAL_FILE))
        self.set_tags({names.TAG_ARTIFACTS_KEPT_LOCAL: len(kept)})
        warning = "%d capture file(s) over tracking.max_artifact_mb=%d stay local; see %s"
        log.warning(warning, len(kept), max_mb, names.KEPT_LOCAL_FILE)

    def describe(self) -> str:
        """Where to find the run, and how to open it (credentials masked)."""
        from runner.tracking.links import run_page, ui_for

        ui = ui_for(self.tracking.uri)
        where = f"MLflow run {self.run_id} in experiment '{self.tracking.experiment}' at {redact(self.tracking.uri)}\n"
        page = run_page(ui, self.experiment_id, str(self.run_id))
        if not ui.start:  # a tracking server serves the UI itself
            return f"{where}  open it: {page}"
        return f"{where}  open it: {ui.start}\n  then:    {page}"
