"""Parameters of a synthetic graph: [`SyntheticSpec`][pipegnn.data.synthetic.spec.SyntheticSpec], checked on
construction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pipegnn.errors import ConfigError
from pipegnn.measure import allocatable_bytes

#: Nodes per block of feature rows the generator counts at a time (it fixes the random stream: keep).
FEATURE_BLOCK = 65536

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

DEFAULT_AVG_DEGREE = 4.5  # PubMed's 88,648 directed edges over 19,717 nodes


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a synthetic graph (defaults: PubMed-shaped).

    The defaults keep PubMed's size (19,717 nodes, 88.7K directed edges, 500 features, 3 classes, the
    60/500/1000 split) and its edge homophily (0.80) and make full-batch GCN and GAT land near PubMed's
    published ~79% with steady learning curves: each node's document is short (5 words) but a word is
    a class keyword with probability 0.2, so a class keyword carries as much of a row's weight as in
    PubMed (mean distance of a class's mean row from the overall mean: 0.032 here, 0.030 in PubMed), and
    a third of the nodes have none and need their neighbours. With longer documents at a weaker signal
    (the former 50 words at 0.07) the same accuracy rests on many tiny per-word differences: training
    is slow and whole classes of validation predictions flip from epoch to epoch.

    Attributes:
        num_nodes: number of nodes.
        avg_degree: mean number of directed edges per node (both directions of an undirected edge count).
            More edges give every node more neighbours to average over: easier for message passing, and
            a wider gap between exact and halo-free (``halo=none``) micro-batches.
        density: directed edges / (num_nodes * (num_nodes - 1)); alternative to ``avg_degree``: set at
            most one of them (neither: ``avg_degree`` = 4.5, PubMed's).
        num_features: vocabulary size of the bag-of-words features; each class's topic is a tenth of it.
        num_classes: number of classes; community ``c`` has class ``c % num_classes``. More classes:
            harder (chance accuracy 1 / num_classes, fewer keywords per class among a node's words).
        num_communities: number of communities (dense blocks of the graph). Class-wise the graph is the
            same for any number; more, smaller communities make neighbourhoods more local (a partitioner
            finds them more easily) without changing the accuracy much.
        homophily: probability that an edge stays inside its source's community (the rest go to
            uniformly random nodes: same class 1 / num_classes of the time, so 0.7 gives PubMed's 0.80
            of same-class edges). Higher: neighbours agree more and message passing gains more over the
            features alone; below ~0.6, GAT's validation accuracy swings by several points per epoch.
        power_law: exponent of the expected-degree distribution (e.g. 2.5) or None for uniform. A low
            exponent concentrates the edges on hubs: isolated and degree-1 nodes appear, and the hubs'
            large neighbourhoods make most of the graph easier.
        words_per_node: words drawn per node's document. Fewer words: each node sees fewer class
            keywords (harder from its own features, more reliance on neighbours) but each carries more
            of the row-normalised weight (faster, steadier training).
        signal: probability that a word comes from the node's class topic rather than the uniform
            background. The main difficulty knob: the features alone reach ~50% (3 classes, 60 labels)
            at the defaults, and with ``words_per_node`` it sets how much of a row is class evidence; a
            weak row signal (0.07 over 50 words) makes learning slow and the curves erratic.
        train_per_class, num_val, num_test: split sizes (Planetoid style); fewer training nodes: harder
            and noisier.
        seed: generator seed; the graph is a pure function of the spec.

    Raises:
        ConfigError: invalid values, both ``avg_degree`` and ``density`` set, or more edges requested
            than a simple graph on ``num_nodes`` nodes has.
    """

    num_nodes: int = 19717
    avg_degree: float | None = None
    density: float | None = None
    num_features: int = 500
    num_classes: int = 3
    num_communities: int = 30
    homophily: float = 0.7
    power_law: float | None = None
    words_per_node: int = 5
    signal: float = 0.2
    train_per_class: int = 20
    num_val: int = 500
    num_test: int = 1000
    seed: int = 0

    def __post_init__(self) -> None:
        def check(key: str, ok: Callable[[Any], bool], rule: str, integer: bool = False,
                  optional: bool = False) -> None:
            value = getattr(self, key)
            if value is None and optional:
                return
            number = (int,) if integer else (int, float)
            if isinstance(value, bool) or not isinstance(value, number) or not ok(value):
                raise ConfigError(f"dataset.{key} must be {rule}, got {value!r}")

        n = self.num_nodes
        check("num_nodes", lambda v: v >= 2, "an integer >= 2", integer=True)
        for key in ("num_features", "num_classes", "num_communities", "words_per_node"):
            check(key, lambda v: v >= 1, "an integer >= 1", integer=True)
        for key in ("train_per_class", "num_val", "num_test", "seed"):
            check(key, lambda v: v >= 0, "an integer >= 0", integer=True)
        for key in ("homophily", "signal"):
            check(key, lambda v: 0 <= v <= 1, "in [0, 1]")
        check("power_law", lambda v: v > 1, "null or > 1", optional=True)
        if self.avg_degree is not None and self.density is not None:
            raise ConfigError(
                f"dataset.avg_degree={self.avg_degree!r} and dataset.density={self.density!r} are both "
                f"set; set exactly one of them and the other to null (e.g. dataset.avg_degree=null "
                f"dataset.density={self.density!r})")
        check("avg_degree", lambda v: 0 < v <= n - 1, f"null or in (0, num_nodes - 1 = {n - 1}]",
              optional=True)
        check("density", lambda v: 0 < v <= 1, "null or in (0, 1]", optional=True)
        if self.num_classes > self.num_communities:
            raise ConfigError(f"dataset.num_classes={self.num_classes} exceeds dataset.num_communities="
                              f"{self.num_communities}: every class needs at least one community")
        if self.train_per_class * self.num_classes + self.num_val + self.num_test > n:
            raise ConfigError(
                f"split sizes ({self.train_per_class} per class x {self.num_classes} classes, "
                f"{self.num_val} val, {self.num_test} test) exceed num_nodes={n}")

    def check_room(self, edges: bool = True, features: str = "memory") -> None:
        """That the graph fits in what this process can still allocate: at least each node's label and
        community and, when its edges are drawn here (``edges``: not read back from a graph store), each
        edge's two directions (int64 pairs); the communities' sizes; the classes' topics over the vocabulary
        (about 40 bytes a word while one is drawn, 16 a topic word kept: a tenth of the words a class); one
        block of documents' word draws (about 32 bytes a word of a document); and the feature matrix
        (``features``: ``memory``, float32 rows; ``disk``, one block of rows at a time; ``none``, nothing).
        A graph past memory (``num_nodes=2e9``, ``num_features=2e9``, ``words_per_node=1e9``,
        ``num_communities=2e9``) is invalid here, not an allocation failure inside the generator
        (``num_features=2e9`` grew to 24 GB and was killed, with no record).

        Raises:
            ConfigError: naming the sizes, the bytes needed and the bytes there are.
        """
        n, f, undirected = self.num_nodes, self.num_features, self.num_undirected_edges
        block = min(n, FEATURE_BLOCK)
        rows = {"memory": n, "disk": block}.get(features, 0)
        need = 16 * n + (32 * undirected if edges else 0) + 16 * self.num_communities + 40 * f \
            + 16 * self.num_classes * (f // 10) + 32 * block * self.words_per_node \
            + (4 * rows * f + 8 * f if rows else 0)
        room = allocatable_bytes()
        if need > room:
            degree = "avg_degree" if self.density is None else "density"
            raise ConfigError(f"dataset.num_nodes={n} with {undirected:,} undirected edges, "
                              f"dataset.num_features={f} (data.features={features}), dataset.words_per_node="
                              f"{self.words_per_node} and dataset.num_communities={self.num_communities} "
                              f"need at least {need:,} bytes, more than this process can still allocate "
                              f"({room:,}); use a smaller dataset.num_nodes, dataset.{degree}, "
                              "dataset.num_features, dataset.words_per_node or dataset.num_communities")

    @property
    def num_undirected_edges(self) -> int:
        """Number of undirected edges the graph gets (each is stored in both directions)."""
        n = self.num_nodes
        if self.density is not None:
            return int(round(float(self.density) * n * (n - 1) / 2))
        degree = DEFAULT_AVG_DEGREE if self.avg_degree is None else self.avg_degree
        return int(round(n * degree / 2))
