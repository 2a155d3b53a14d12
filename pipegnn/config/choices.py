"""The choices a run's config offers, one ``StrEnum`` per key: the schemas
([`pipegnn.config.schema`][pipegnn.config.schema]) type their fields with them, so that composition
rejects a value that is not one of them, and the packages that implement a choice take their names from here.

Each member's name is its value (the YAML spelling), which is what OmegaConf matches a string against,
and a ``StrEnum`` member is a ``str``: it compares equal to its spelling and is written to JSON as it.
Spellings that are no Python name (``1f1b``, ``ogbn-arxiv``) are members all the same, made with the
functional API (``Schedule("1f1b")``).

This module imports nothing of pipegnn: every layer of the package may read it.
"""
from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour from the str mix-in
    class StrEnum(str, Enum):
        """A member is its value, as a ``str``."""

        def __str__(self) -> str:
            return str(self.value)

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def names(choice: type[StrEnum]) -> tuple[str, ...]:
    """The spellings of ``choice``'s members, in their order (for messages and ``check_choice``)."""
    return tuple(member.value for member in choice)


# The two enums made with the functional API are declared as classes to mypy (and to the API pages, read
# statically), as mypy types that API only when it is called on enum's own classes (it checks the package
# as Python 3.10, where StrEnum is the class above). A class body cannot name a member whose spelling is no
# Python name: these classes lack those members, which the package reaches by value alone
# (``Schedule("1f1b")``). At run time: the else branches.
if TYPE_CHECKING:
    class DatasetName(StrEnum):
        """``dataset.name``: the loaders of [`pipegnn.data`][pipegnn.data]; also ``ogbn-arxiv`` and
        ``ogbn-products`` (spelt as OGB does, which is no Python name: ``DatasetName("ogbn-arxiv")``), between
        ``pubmed_topology`` and ``reddit``."""

        cora = "cora"
        citeseer = "citeseer"
        pubmed = "pubmed"
        pubmed_topology = "pubmed_topology"
        reddit = "reddit"
        amazon_computers = "amazon_computers"
        amazon_photo = "amazon_photo"
        coauthor_cs = "coauthor_cs"
        coauthor_physics = "coauthor_physics"
        synthetic = "synthetic"
else:
    DatasetName = StrEnum("DatasetName", [(name, name) for name in (
        "cora", "citeseer", "pubmed", "pubmed_topology", "ogbn-arxiv", "ogbn-products", "reddit",
        "amazon_computers", "amazon_photo", "coauthor_cs", "coauthor_physics", "synthetic")])

#: The graphs of the GNN benchmark study (co-purchase and co-authorship; pipegnn.data.study_graphs).
STUDY_GRAPHS = tuple(DatasetName(name) for name in (
    "amazon_computers", "amazon_photo", "coauthor_cs", "coauthor_physics"))


class Split(StrEnum):
    """``dataset.split`` of a graph without a standard split (the co-purchase and co-authorship graphs):
    drawn per ``dataset.split_seed``."""

    per_class = "per_class"  # the study's: train_per_class and val_per_class nodes of each class, rest test
    random = "random"  # train_fraction and val_fraction of all nodes, rest test (a dense split)


class Storage(StrEnum):
    """``data.features``: where the node features are kept while training."""

    memory = "memory"
    disk = "disk"
    sparse = "sparse"  # in memory as a CSR matrix (bag-of-words features; pipegnn.sparse)


class EdgeStorage(StrEnum):
    """``data.edges``: where the computation graph's edges are kept while plans are built and drawn."""

    memory = "memory"
    disk = "disk"  # a graph store's CSC files (pipegnn.data.graph_store), read by position


class ModelName(StrEnum):
    """``model.name``."""

    gat = "gat"
    gcn = "gcn"
    sage = "sage"
    gcn2 = "gcn2"


class Aggregation(StrEnum):
    """``model.aggregation``: message passing, or a sparse matrix product (which a framework offers per
    model: [`pipegnn.backends.base.aggregations`][pipegnn.backends.base.aggregations])."""

    messages = "messages"
    sparse = "sparse"


class FrameworkName(StrEnum):
    """``framework.name``: the layer library."""

    pyg = "pyg"
    dgl = "dgl"


class EngineName(StrEnum):
    """``engine.name``."""

    single = "single"
    gpipe = "gpipe"
    pipelining = "pipelining"
    dgl_loader = "dgl_loader"  # DGL's own loop (pipegnn.training.dgl_loader): a baseline runner


class Capture(StrEnum):
    """``engine.capture``: eager steps, or the single engine's step recorded as a CUDA graph."""

    none = "none"
    cuda_graph = "cuda_graph"


class Checkpoint(StrEnum):
    """``engine.checkpoint`` (GPipe): torchgpipe's activation checkpointing modes."""

    always = "always"
    except_last = "except_last"
    never = "never"


if TYPE_CHECKING:  # see DatasetName
    class Schedule(StrEnum):
        """``engine.schedule`` (pipelining): torch.distributed.pipelining's schedules; also ``1f1b``
        (no Python name: ``Schedule("1f1b")``), between ``gpipe`` and ``interleaved1f1b``."""

        gpipe = "gpipe"
        interleaved1f1b = "interleaved1f1b"
else:
    Schedule = StrEnum("Schedule", [("gpipe", "gpipe"), ("1f1b", "1f1b"),
                                    ("interleaved1f1b", "interleaved1f1b")])


class Launcher(StrEnum):
    """``engine.launcher`` (pipelining): the run starts its workers, or torchrun started this process."""

    spawn = "spawn"
    external = "external"


class StartMethod(StrEnum):
    """``engine.start_method`` (pipelining, ``launcher=spawn``)."""

    forkserver = "forkserver"
    spawn = "spawn"


class DistBackend(StrEnum):
    """``engine.backend`` (pipelining): the process group's backend (``auto``: by the devices)."""

    auto = "auto"
    gloo = "gloo"
    nccl = "nccl"


class Halo(StrEnum):
    """``microbatch.halo``: the poster's induced subgraphs, exact L-hop halos, historical ones, or
    neighbourhoods sampled anew every epoch (``microbatch.fanouts``)."""

    none = "none"
    exact = "exact"
    historical = "historical"
    sampled = "sampled"


class Evaluation(StrEnum):
    """``microbatch.evaluation``: evaluate with micro-batches of the training halo mode (``plan``: exact
    ones for sampled halos), or layer by layer over every node's 1-hop block (``layerwise``: full-graph
    outputs at about full batch's work; what historical halos always do)."""

    plan = "plan"
    layerwise = "layerwise"


class HaloDropout(StrEnum):
    """``microbatch.halo_dropout`` (historical halos): a mask per read of a halo row, or per node."""

    read = "read"
    node = "node"


class FirstTransform(StrEnum):
    """``microbatch.first_transform``: the first layer's transform once per step or per micro-batch."""

    once_per_step = "once_per_step"
    per_micro_batch = "per_micro_batch"


class Partitioner(StrEnum):
    """``microbatch.partition``: how the targets are split into micro-batches."""

    sequential = "sequential"
    random = "random"
    bfs = "bfs"
    metis = "metis"


class Targets(StrEnum):
    """``microbatch.targets``: the nodes a training step computes."""

    train = "train"
    all = "all"


class Precision(StrEnum):
    """``train.precision``."""

    fp32 = "fp32"
    bf16 = "bf16"


class Monitor(StrEnum):
    """``train.monitor``: what picks the best epoch and what early stopping waits on."""

    val_acc = "val_acc"
    val_loss = "val_loss"
