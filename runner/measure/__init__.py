"""Measurement: build the workload, run the timed and profiled phases, turn them into numbers."""
