"""Scripts that print figures about the runner (not tests); a package so that a job can load benchmarks.extra_work."""
