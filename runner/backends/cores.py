"""NeuronCore sets in the runtime's syntax ("0", "0-3", "0-3,8-11"), torch-free so config validation can use it."""

from __future__ import annotations

import re

from runner.errors import ConfigError

CORE_SPEC = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
CORE_SYNTAX = "a core (0), a range (0-3) or a comma list (0-3,8-11)"


def parse_cores(spec: str, key: str) -> list[int]:
    """Expand a core spec like '0,2-3' into [0, 2, 3].

    Raises:
        ConfigError: the spec is malformed; the message shows the accepted syntax.
    """
    text = str(spec).replace(" ", "")
    if not CORE_SPEC.match(text):
        raise ConfigError(f"{key}={spec!r} is not a core spec; use {CORE_SYNTAX}")
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise ConfigError(f"{key}={spec!r}: range {part} runs backwards; use {CORE_SYNTAX}")
        cores.update(range(low, high + 1))
    return sorted(cores)


def parse_core_range(spec: str, key: str) -> list[int]:
    """Expand a core spec that the Neuron runtime accepts: one core, or one contiguous range.

    Raises:
        ConfigError: the spec is malformed or its cores are not contiguous (the runtime
            refuses `NEURON_RT_VISIBLE_CORES=0,2-3`).
    """
    cores = parse_cores(spec, key)
    if cores[-1] - cores[0] + 1 != len(cores):
        raise ConfigError(
            f"{key}={spec!r} is not one contiguous range of NeuronCores; the Neuron runtime takes a single core "
            f"or one range (e.g. {cores[0]} or {cores[0]}-{cores[0] + len(cores) - 1})"
        )
    return cores


def format_cores(cores: list[int]) -> str:
    """Write cores in the runtime's syntax: '0-3' for a run, '0,2-3' otherwise."""
    parts: list[str] = []
    start = prev = cores[0]
    for core in [*cores[1:], None]:
        if core is not None and core == prev + 1:
            prev = core
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if core is not None:
            start = prev = core
    return ",".join(parts)
