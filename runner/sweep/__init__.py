"""A sweep around its jobs: what the Hydra callbacks (`runner.callbacks`) do before the first job and after the last.

`jobs` says which jobs the sweeper will launch, the keys they vary and whether they can share
one process; `rounds` times their steady state in interleaved rounds before the first job
(it loads torch, so it is imported by name, past the sweep's checks); `summary` reads what
became of each job from its status file. This package module imports nothing.
"""
