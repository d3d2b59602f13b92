"""Config validation and the NeuronCore syntax load without torch (`--help` and bad input stay fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def test_config_and_the_core_syntax_import_without_torch() -> None:
    probe = (
        "import sys\n"
        "from runner.backends.cores import parse_core_range\n"
        "import runner.config\n"
        "import runner.config_loading\n"
        "print(parse_core_range('2-3', 'backend.cores'), sorted(m for m in ('torch', 'mlflow') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout == "[2, 3] []\n"


@pytest.mark.parametrize(
    ("override", "refusal"),
    [
        pytest.param("measure.stepz=1", "error: measure.stepz is not a config key; did you mean", id="typo"),
        pytest.param("measure.steps=0", "error: measure.steps must be >= 1, got 0", id="value"),
    ],
)
def test_python_m_runner_refuses_a_bad_config_before_torch_or_slurm_support_loads(
    override: str, refusal: str, tmp_path: Path
) -> None:
    """A key Hydra refuses as it composes, and a value the job refuses: neither waits for torch or submitit."""
    args = [
        "+workload=rmsnorm_naive",
        override,
        f"hydra.run.dir={tmp_path}/run",
        f"tracking.uri=sqlite:///{tmp_path}/db",
    ]
    probe = (
        "import sys\n"
        "from runner.__main__ import cli\n"
        f"sys.argv = ['runner', *{args!r}]\n"
        "try:\n"
        "    cli()\n"
        "except SystemExit as exit:\n"
        "    print(exit.code)\n"
        "print(sorted(m for m in ('torch', 'submitit') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    said, loaded = done.stdout.splitlines()
    assert said.startswith(refusal) and loaded == "[]", done.stdout
