"""Backends: every device decision behind one interface (`runner.backends.base.Backend`).

`registry` resolves `backend=auto` and builds a job's backend; `cores` (the NeuronCore syntax)
is torch-free, so config validation uses it without loading torch. This package module imports
nothing, so importing `cores` loads no device library.
"""
