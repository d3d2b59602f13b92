"""Loaded by each interpreter started with this folder on PYTHONPATH: with RUNNER_FORK_WITNESS set, before
every `os.fork` it writes a JSON line to that file saying what the forking process holds that a forked
child cannot use: CUDA initialised, the Neuron stand-in's runtime started, the compiler imported (which
asks CUDA for its devices on a CUDA build). The stand-in itself enforces the Neuron rule in the child.
"""

from __future__ import annotations

import json
import os
import sys

WITNESS_ENV = "RUNNER_FORK_WITNESS"
COMPILER_MODULES = ("torch._dynamo", "torch._inductor")


def _before_fork() -> None:
    torch = sys.modules.get("torch")
    neuron = sys.modules.get("torch_neuronx.neuron")
    held = {
        "pid": os.getpid(),
        "fork_server": "multiprocessing.forkserver" in " ".join(sys.orig_argv),
        "cuda_initialized": bool(torch is not None and torch.cuda.is_initialized()),
        "neuron_runtime": bool(neuron is not None and neuron.is_initialized()),
        "compiler": [name for name in COMPILER_MODULES if name in sys.modules],
    }
    with open(os.environ[WITNESS_ENV], "a") as log:
        log.write(json.dumps(held) + "\n")


if os.environ.get(WITNESS_ENV):
    os.register_at_fork(before=_before_fork)
