"""A sweep around its jobs: what the Hydra callbacks (`runner.callbacks`) do before the first job and after the last.

`rounds` loads torch, so it is imported by name, past the sweep's checks; this package module imports nothing.
"""
