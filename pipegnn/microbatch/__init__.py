"""Graph-aware micro-batching: partitioners, halos, plans and their statistics."""
from pipegnn.microbatch.cache import cached_plan, plan_key
from pipegnn.microbatch.halo import HALOS, MicroBatch
from pipegnn.microbatch.history import HALO_DROPOUTS, History
from pipegnn.microbatch.partition import PARTITIONERS, partition
from pipegnn.microbatch.plan import ComputationGraph, MicroBatchPlan, PlanSpec, PlanStats, build_plan
from pipegnn.microbatch.sample import NeighbourSampler

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)
