"""Graph-aware micro-batching: partitioners, halos, plans and their statistics."""
from pipegnn.microbatch.halo import HALOS, MicroBatch
from pipegnn.microbatch.history import History
from pipegnn.microbatch.partition import PARTITIONERS, partition
from pipegnn.microbatch.plan import MicroBatchPlan, PlanStats, build_plan

__all__ = ["HALOS", "PARTITIONERS", "History", "MicroBatch", "MicroBatchPlan", "PlanStats", "build_plan",
           "partition"]
