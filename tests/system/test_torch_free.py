"""Config validation and the NeuronCore syntax load without torch (`--help` and bad input stay fast)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO


def test_config_and_the_core_syntax_import_without_torch() -> None:
    probe = (
        "import sys\n"
        "from runner.backends.cores import parse_core_range\n"
        "import runner.config\n"
        "print(parse_core_range('2-3', 'backend.cores'), sorted(m for m in ('torch', 'mlflow') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout == "[2, 3] []\n"
