"""Where the Neuron tools (neuron-explorer, neuron-monitor, neuron-ls, neuron-top) are, torch-free."""

from __future__ import annotations

import shutil
from pathlib import Path

# aws-neuronx-tools installs them here, often off PATH: "Tools not installed, or /opt/aws/neuron/bin
# is not in PATH" (SDK:tools/neuron-explorer/troubleshooting.rst)
NEURON_BIN = Path("/opt/aws/neuron/bin")


def neuron_tool(name: str) -> str | None:
    """The tool's path: the one on PATH first, else the installed one; None where neither is."""
    return shutil.which(name) or shutil.which(name, path=str(NEURON_BIN))
