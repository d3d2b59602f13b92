"""A sweep around its jobs: what the Hydra callbacks do before the first job, after the last (`rounds` loads torch)."""
