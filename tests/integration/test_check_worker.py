"""The check worker each side of `gate --against` runs once: its first call, then the output as a job checks it."""

from __future__ import annotations

import pytest

from runner import names
from runner.config_loading import load_run_spec
from runner.execute.processes import ChildFailed
from runner.execute.workers import checked_first_call
from tests.helpers import compose_cfg

QUICK = ["backend=cpu", "tracking=off", "measure=quick"]
FAULTY = ["+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[2,4]]"]


def test_a_nan_output_is_logged_as_a_job_logs_it() -> None:
    checked = checked_first_call(load_run_spec(compose_cfg(*QUICK, *FAULTY, "+workload.fault=nonfinite")), "nan")
    assert checked[names.TAG_OUTPUT_FINITE] == "false: 8 of 8 elements are NaN or infinite"
    assert checked[names.TAG_ACCURACY] == "skipped"  # Faulty has no reference()
    assert isinstance(checked[names.FIRST_CALL_S], float) and checked[names.FIRST_CALL_S] > 0
    assert names.PEAK_DEVICE_MB not in checked  # the CPU counts no device peak


def test_a_workload_with_a_reference_has_its_accuracy_checked() -> None:
    spec = load_run_spec(compose_cfg(*QUICK, "+workload=rmsnorm_naive", "workload.hidden=8"))
    checked = checked_first_call(spec, "rmsnorm")
    assert (checked[names.TAG_OUTPUT_FINITE], checked[names.TAG_ACCURACY]) == ("true", "pass")
    spec = load_run_spec(compose_cfg(*QUICK, "+workload=rmsnorm_naive", "workload.hidden=8", "measure.accuracy=false"))
    assert names.TAG_ACCURACY not in checked_first_call(spec, "rmsnorm")


def test_a_check_worker_that_raises_fails_with_its_reason() -> None:
    """Its first call raises only from the second call on: the check's forward is the second."""
    spec = load_run_spec(compose_cfg(*QUICK, *FAULTY, "+workload.fault=raise"))
    with pytest.raises(ChildFailed, match="RuntimeError: injected failure"):
        checked_first_call(spec, "raise")
