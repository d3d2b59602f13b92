"""Where the Neuron tools (neuron-explorer, neuron-monitor, neuron-ls, neuron-top) are, torch-free."""

from __future__ import annotations

import shutil
from pathlib import Path

# aws-neuronx-tools installs them here, often off PATH: "Tools not installed, or /opt/aws/neuron/bin
# is not in PATH" (SDK:tools/neuron-explorer/troubleshooting.rst)
NEURON_BIN = Path("/opt/aws/neuron/bin")


def neuron_tool(name: str) -> str | None:
    """What to run: the name where PATH has it (a user's PATH wins), else its path in NEURON_BIN; None if neither."""
    return name if shutil.which(name) else shutil.which(name, path=str(NEURON_BIN))
