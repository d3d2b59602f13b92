"""PyTorch workloads the runner profiles: modules whose forward is the thing measured."""

from workloads.base import CostModel, Workload

__all__ = ["CostModel", "Workload"]
