"""Imported by a fork server whose workers torch.compile for the CPU: inductor's probe of this CPU, run once for all.

Before its first CPU kernel, inductor finds the vector instruction sets (AVX2, AVX-512, ...) this
CPU and compiler can use by building a small library for each and loading it in a new
interpreter: 2.2-2.6 s of a cached recompile's 2.5-3 s in a fresh process, measured on this
project's 2-core host. It caches the answer for the process's life, so the workers forked from
the server inherit it and start compiling at once. The probe builds and loads libraries only; it
touches no device.
"""

from __future__ import annotations

from contextlib import suppress

from torch._inductor.cpu_vec_isa import valid_vec_isa_list

# the server dies of any error but an ImportError while it preloads: a probe that fails leaves
# each worker to probe in its own first call, as it would without the server, and say why there
with suppress(Exception):
    valid_vec_isa_list()
