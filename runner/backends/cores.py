"""NeuronCore sets in the runtime's syntax ("0", "0-3", "0-3,8-11") and the logical NeuronCore setting, torch-free."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from itertools import groupby

from runner.errors import ConfigError

_CORE_SPEC = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_CORE_SYNTAX = "a core (0), a range (0-3) or a comma list (0-3,8-11)"
# physical NeuronCores per logical one, "1 or 2"; LNC "applies only to Trn2 and Trn3", and no Trn3
# default is given (SDK:about-neuron/arch/neuron-features/logical-neuroncore-config.rst)
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
DEFAULT_LNC = {"trn1": 1, "trn2": 2}
# the runtime's physical NeuronCores per virtual (logical) one, the LNC under another name; documented default 1
# (SDK:tools/neuron-explorer/environment-variables.rst; glossary.rst, "VNC")
VIRTUAL_CORE_SIZE_ENV = "NEURON_RT_VIRTUAL_CORE_SIZE"


def parse_cores(spec: str, key: str) -> list[int]:
    """Expand a core spec like '0,2-3' into [0, 2, 3].

    Raises:
        ConfigError: the spec is malformed; the message shows the accepted syntax.
    """
    text = str(spec).replace(" ", "")
    if not _CORE_SPEC.match(text):
        raise ConfigError(f"{key}={spec!r} is not a core spec; use {_CORE_SYNTAX}")
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if high < low:
            raise ConfigError(f"{key}={spec!r}: range {part} runs backwards; use {_CORE_SYNTAX}")
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


def consecutive_runs(cores: list[int]) -> list[list[int]]:
    """Split cores into runs of consecutive cores (each one more than the last), keeping their order."""
    return [[core for _, core in run] for _, run in groupby(enumerate(cores), lambda pair: pair[1] - pair[0])]


def format_cores(cores: list[int]) -> str:
    """Write cores in the runtime's syntax: '0-3' for a run, '0,2-3' otherwise."""
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in consecutive_runs(cores))


def logical_nc_config(generation: str, environ: Mapping[str, str] = os.environ) -> tuple[int | None, str]:
    """Physical NeuronCores per logical one on this Trainium generation (None: unknown), and where that came from.

    Raises:
        ConfigError: the variable is set to anything but 1 or 2 on Trn2 or Trn3.
    """
    value = environ.get(LNC_ENV, "")
    if generation == "trn1" or not value:
        lnc = DEFAULT_LNC.get(generation)
        if lnc is None:
            return None, f"unknown: {LNC_ENV} is unset and the Neuron docs give no {generation} default"
        return lnc, f"{lnc}, the documented {generation} default" + (f" ({LNC_ENV} does not apply)" if value else "")
    if value not in ("1", "2"):
        raise ConfigError(f"{LNC_ENV}={value!r} is not allowed; choose one of: 1, 2")
    return int(value), f"{value}, from {LNC_ENV}"


def lnc_check(runner_lnc: tuple[int | None, str], others: dict[str, str | None]) -> tuple[str, list[str]]:
    """The `neuron.lnc_check` tag, and one warning line naming each source whose LNC differs from the runner's.

    `runner_lnc` is `logical_nc_config`'s answer (the LNC and where it came from); `others` maps a
    source (a variable, a tool's field) to the physical NeuronCores per logical one it gives, None
    where it gives none: a disagreement means the roofline's per-core share and the link classes are
    computed for cores the job does not have.
    """
    lnc, origin = runner_lnc
    given = {source: value for source, value in others.items() if value is not None}
    if lnc is None or not given:
        return f"unchecked: the runner's LNC is {lnc or 'unknown'}; compared with {', '.join(given) or 'nothing'}", []
    differ = {source: value for source, value in given.items() if value != str(lnc)}
    lines = [f"{source}={value} disagrees with the runner's LNC {lnc}" for source, value in differ.items()]
    if lines:
        fix = f"the runner's LNC is {origin}: set {LNC_ENV} to the LNC the job runs at"
        return f"warning: {'; '.join(lines)}", [f"LNC mismatch: {'; '.join(lines)} ({fix})"]
    return f"ok: LNC {lnc}, as {', '.join(given)} give", []
