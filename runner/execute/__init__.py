"""How many processes measure a job, and where: its own, fresh workers or copies, ranks, or a Slurm job's tasks.

Each of those processes runs `runner.measure`: one built workload, measured in one process.
"""
