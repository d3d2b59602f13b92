"""How many processes measure a job, and where.

A job is measured in its own process (`in_process`), with its steady state timed there, in
fresh worker processes one after another, or in copies side by side (`workers`); as several
torch.distributed ranks on this host (`ranks`); or as the tasks of one Slurm job across hosts
(`slurm_ranks`). What each of those processes runs is `runner.measure`: one built workload,
measured in one process.
"""
