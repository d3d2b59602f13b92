"""PyTorch workloads the runner profiles: modules whose forward is the thing measured."""

from workloads.base import Workload

__all__ = ["Workload"]
