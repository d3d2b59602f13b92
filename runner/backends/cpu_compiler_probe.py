"""Imported by a fork server whose workers torch.compile for the CPU: inductor's probe of this CPU, run once for all.

Inductor finds the CPU's vector instruction sets by building and loading a small library for each:
2.2-2.6 s of a cached recompile's 2.5-3 s in a fresh process on the 2-core host. It caches the answer
for the process's life, so forked workers inherit it. The probe touches no device.
"""

from __future__ import annotations

from contextlib import suppress

from torch._inductor.cpu_vec_isa import valid_vec_isa_list

# the server dies of any error but an ImportError while it preloads: a probe that fails leaves
# each worker to probe in its own first call, as it would without the server, and say why there
with suppress(Exception):
    valid_vec_isa_list()
