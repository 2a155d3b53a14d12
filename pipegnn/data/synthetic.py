"""Embedded synthetic graphs: communities, class-correlated bag-of-words features, no download.

Vectorised generation (no Python loop over nodes or edges) with bounded temporaries: edges are drawn in
chunks of int32 node ids, deduplicated with one in-place sort, and the undirected edge list is built
without a second coalesce; features are counted in node blocks, and topics are stored by their keywords
only. In memory the output dominates: N x F float32 features plus the [2, E] int64 edge list (5M nodes x
128 features: 2.5 GB; 50M directed edges: 0.8 GB).

Features beyond memory (``features="disk"``): the feature matrix is written block by block into a
feature file (:mod:`pipegnn.data.features`) and never exists whole. A row's TF-IDF weight needs every
row's word counts (the document frequencies), so the blocks' draws run twice from the same generator
state: a first pass counts the document frequencies (and leaves the generator where the in-memory path
leaves it, so the split after it is the same), a second pass, replayed from the saved state, counts,
weighs and row-normalises each block and writes it. Both paths run the same per-block code, so the
values are identical to the in-memory graph's; the price is drawing the features twice. With
``features="none"`` the feature draws are made and discarded without counting (only the split depends
on them): topology, labels and split alone.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from typing import Iterator

import torch
from torch import Tensor

from pipegnn.data.features import DiskFeatureStore, FeatureMeta
from pipegnn.data.graph import Graph
from pipegnn.edges import sorted_unique
from pipegnn.errors import ConfigError

__all__ = ["DEFAULT_AVG_DEGREE", "SyntheticSpec", "feature_key", "make_synthetic"]

log = logging.getLogger(__name__)

DEFAULT_AVG_DEGREE = 4.5  # PubMed's 88,648 directed edges over 19,717 nodes
_FEATURE_BLOCK = 65536  # nodes per block when building features (fixes the random stream: keep)
_CHUNK = 1 << 22  # edge draws per chunk when building edges (does not change the random stream)
_TOP_UP_ROUNDS = 32  # extra draw rounds when duplicates left fewer distinct edges than requested
_FEATURES_VERSION = 1  # bump when the feature values of a spec change (keys cached feature files)


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
            a wider gap between exact and naive (halo-free) micro-batches.
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
        def check(key: str, ok, rule: str, integer: bool = False, optional: bool = False) -> None:
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

    @property
    def num_undirected_edges(self) -> int:
        """Number of undirected edges the graph gets (each is stored in both directions)."""
        n = self.num_nodes
        if self.density is not None:
            return int(round(float(self.density) * n * (n - 1) / 2))
        degree = DEFAULT_AVG_DEGREE if self.avg_degree is None else self.avg_degree
        return int(round(n * degree / 2))


def make_synthetic(spec: SyntheticSpec, name: str = "synthetic", *, features: str = "memory",
                   store: DiskFeatureStore | None = None) -> Graph:
    """Generate the graph described by ``spec`` (deterministic for a given spec).

    Args:
        spec: the graph's parameters.
        name: the graph's name.
        features: ``memory`` (``x`` holds them), ``disk`` (written block by block into ``store``,
            keyed by :func:`feature_key`; ``x`` is None and ``features`` describes the file) or ``none``
            (not generated: ``x`` is None and ``features`` holds only their shape and dtype). The
            topology, labels, split and feature values are the same in every mode.
        store: where ``disk`` writes them.
    """
    if features not in ("memory", "disk", "none") or (features == "disk") != (store is not None):
        raise ValueError(f"features={features!r} (store {store!r}): memory, none, or disk with a store")
    g = torch.Generator().manual_seed(spec.seed)
    n = spec.num_nodes
    community = torch.randint(spec.num_communities, (n,), generator=g)
    y = community % spec.num_classes
    edge_index = _edges(spec, community, g)
    topics = _topics(spec, g)
    start = g.get_state()
    x, meta = None, FeatureMeta(n, spec.num_features, torch.float32)
    if features == "memory":
        x = _features(spec, y, topics, g)
    elif features == "disk":
        idf = _idf(_document_frequency(spec, y, topics, g), n)
    else:
        _skip_features(spec, g)
    train, val, test = _split(spec, y, g)  # the generator is where the in-memory features leave it
    if store is not None:
        replay = torch.Generator()
        replay.set_state(start)
        store.write(_feature_rows(spec, y, topics, idf, replay), rows=n, cols=spec.num_features,
                    dtype=torch.float32, key=feature_key(spec))
        meta = store.meta()
    return Graph(name=name, x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=val,
                 test_mask=test, num_classes=spec.num_classes, features=None if x is not None else meta)


def feature_key(spec: SyntheticSpec) -> str:
    """Key of the feature values ``spec`` generates (feature files are cached by it)."""
    text = json.dumps({"generator": _FEATURES_VERSION, **asdict(spec)}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _index_dtype(n: int) -> torch.dtype:
    return torch.int32 if n < 2**31 else torch.int64


def _node_weights(spec: SyntheticSpec, g: torch.Generator) -> Tensor | None:
    """Expected-degree weights of a Chung-Lu power law (random node order), or None for uniform."""
    if spec.power_law is None:
        return None
    rank = torch.randperm(spec.num_nodes, generator=g).double() + 1.0
    return rank.pow(-1.0 / (spec.power_law - 1.0))


def _sample(cdf: Tensor | None, count: int, g: torch.Generator, high: int) -> Tensor:
    """``count`` node ids in ``[0, high)``, uniform or by inverse ``cdf`` (cumulative weights), drawn in
    chunks (the random stream is the same as one draw of ``count``)."""
    dtype = _index_dtype(high)
    if cdf is None:
        return torch.randint(high, (count,), generator=g, dtype=dtype)
    out = torch.empty(count, dtype=dtype)
    for s in range(0, count, _CHUNK):
        u = torch.rand(min(_CHUNK, count - s), generator=g, dtype=torch.float64).mul_(cdf[-1])
        out[s:s + u.numel()] = torch.searchsorted(cdf, u, out_int32=dtype == torch.int32).clamp_(
            max=high - 1)
    return out


def _draw_pairs(spec: SyntheticSpec, draws: int, cdf: Tensor | None, order: Tensor, sizes: Tensor,
                starts: Tensor, community: Tensor, g: torch.Generator) -> Tensor:
    """Keys ``lo * n + hi`` (lo < hi) of ``draws`` random edges, self-loops dropped, unsorted."""
    n = spec.num_nodes
    src = _sample(cdf, draws, g, n)
    # Inside the source's community: pick a uniform member via the community-sorted node order.
    dst = torch.empty_like(src)
    for s in range(0, draws, _CHUNK):
        c = community[src[s:s + _CHUNK]]
        r = torch.rand(c.numel(), generator=g).mul_(sizes[c])
        dst[s:s + c.numel()] = order[starts[c] + r.long().clamp_(max=n - 1)]
    outside = _sample(cdf, draws, g, n)
    keys = []
    for s in range(0, draws, _CHUNK):
        a, b = src[s:s + _CHUNK], dst[s:s + _CHUNK]
        b = torch.where(torch.rand(a.numel(), generator=g) < spec.homophily, b, outside[s:s + _CHUNK])
        keep = a != b
        a, b = a[keep].long(), b[keep].long()
        keys.append(torch.minimum(a, b).mul_(n).add_(torch.maximum(a, b)))
    return torch.cat(keys)


def _edges(spec: SyntheticSpec, community: Tensor, g: torch.Generator) -> Tensor:
    n = spec.num_nodes
    target = spec.num_undirected_edges
    if target > n * (n - 1) // 2:
        raise ConfigError(f"dataset: {target} undirected edges requested but {n} nodes have only "
                          f"{n * (n - 1) // 2} distinct pairs; lower dataset.avg_degree or dataset.density")
    draws = int(target * 1.05) + 16  # a few extra to replace duplicates and self-loops
    weights = _node_weights(spec, g)
    cdf = None if weights is None else weights.cumsum(0)
    del weights
    order = torch.argsort(community, stable=True).to(_index_dtype(n))
    sizes = torch.bincount(community, minlength=spec.num_communities)
    starts = sizes.cumsum(0) - sizes
    pairs = sorted_unique(_draw_pairs(spec, draws, cdf, order, sizes, starts, community, g))
    for _ in range(_TOP_UP_ROUNDS):  # dense graphs: duplicates ate more than the 5% margin
        if pairs.numel() >= target:
            break
        rate = max(pairs.numel() / draws, 0.05)  # distinct edges per draw so far
        more = int((target - pairs.numel()) / rate * 1.1) + 16
        draws += more
        extra = _draw_pairs(spec, more, cdf, order, sizes, starts, community, g)
        pairs = sorted_unique(torch.cat([pairs, extra]))
    if pairs.numel() < target:
        log.warning("synthetic graph: only %d of %d requested undirected edges are distinct after %d "
                    "draws (communities too small for this degree?)", pairs.numel(), target, draws)
    # A random subset of ``target`` distinct pairs, kept in sorted order.
    chosen = torch.zeros(pairs.numel(), dtype=torch.bool)
    chosen[torch.randperm(pairs.numel(), generator=g)[:target]] = True
    pairs = pairs[chosen]
    del chosen
    # Both directions, sorted by (source, target): what coalesce(to_undirected(...)) gives.
    keys = torch.empty(2 * pairs.numel(), dtype=torch.int64)
    lo, hi = keys[:pairs.numel()], keys[pairs.numel():]
    torch.div(pairs, n, rounding_mode="floor", out=lo)
    torch.remainder(pairs, n, out=hi)
    hi.mul_(n).add_(lo)  # hi * n + lo: the reverse direction
    lo.copy_(pairs)
    del pairs
    keys.numpy().sort()
    edge_index = torch.empty(2, keys.numel(), dtype=torch.int64)
    torch.div(keys, n, rounding_mode="floor", out=edge_index[0])
    torch.remainder(keys, n, out=edge_index[1])
    return edge_index


def _topics(spec: SyntheticSpec, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """Each class's topic: a random tenth of the vocabulary, Zipf-weighted.

    Returns the topic words of each class in ascending order ``[C, K + 1]`` (last column: the last word,
    for draws beyond the final CDF value) and the CDF at those words ``[C, K]``: the jump points of the
    dense per-class CDF over the vocabulary, so memory is ``O(C * K)`` and never ``O(C * F)`` at once.
    """
    f, classes = spec.num_features, spec.num_classes
    keywords = max(1, f // 10)
    zipf = 1.0 / torch.arange(1, keywords + 1, dtype=torch.float64)
    words = torch.full((classes, keywords + 1), f - 1, dtype=torch.long)
    cdfs = torch.empty(classes, keywords, dtype=torch.float64)
    for c in range(classes):
        topic = torch.zeros(f, dtype=torch.float64)
        topic[torch.randperm(f, generator=g)[:keywords]] = zipf
        cdf = (topic / topic.sum()).cumsum(0)
        words[c, :keywords] = topic.nonzero().view(-1)
        cdfs[c] = cdf[words[c, :keywords]]
    return words, cdfs


def _blocks(n: int) -> Iterator[tuple[int, int]]:
    """``(first node, nodes)`` of every feature block."""
    for start in range(0, n, _FEATURE_BLOCK):
        yield start, min(_FEATURE_BLOCK, n - start)


def _draws(spec: SyntheticSpec, b: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """The random draws of one block of ``b`` documents: the inverse-CDF draw of every word, the
    background words, and whether each word is a class keyword (the block's only draws from ``g``)."""
    words = spec.words_per_node
    u = torch.rand(b, words, generator=g, dtype=torch.float64)
    word = torch.randint(spec.num_features, (b, words), generator=g)  # background words
    picked = torch.rand(b, words, generator=g) < spec.signal
    return u, word, picked


def _count_block(spec: SyntheticSpec, yb: Tensor, topics: tuple[Tensor, Tensor], g: torch.Generator,
                 out: Tensor) -> None:
    """Add the word counts of the documents of nodes with labels ``yb`` to ``out`` (zeros ``[b, F]``)."""
    f, words = spec.num_features, spec.words_per_node
    topic_words, cdfs = topics
    b = yb.numel()
    u, word, picked = _draws(spec, b, g)
    # A fraction ``signal`` of the words comes from the node's class topic instead (inverse CDF);
    # only those draws are looked up, one searchsorted per class.
    picked = picked.view(-1).nonzero().view(-1)
    u = u.view(-1)[picked]
    cls = yb[picked // words]
    by_class = torch.argsort(cls, stable=True)
    topical = torch.empty_like(picked)
    lo = 0
    for c, size in enumerate(torch.bincount(cls, minlength=spec.num_classes).tolist()):
        if size:
            at = by_class[lo:lo + size]
            topical[at] = topic_words[c][torch.searchsorted(cdfs[c], u[at])]
            lo += size
    word.view(-1)[picked] = topical
    flat = word.add_(torch.arange(b).unsqueeze(1) * f).view(-1)
    out.view(-1).index_add_(0, flat, torch.ones(flat.numel(), dtype=out.dtype))


def _skip_features(spec: SyntheticSpec, g: torch.Generator) -> None:
    """Advance ``g`` past the feature draws without counting anything."""
    for _, b in _blocks(spec.num_nodes):
        _draws(spec, b, g)


def _idf(df: Tensor, n: int) -> Tensor:
    return torch.log(n / (1.0 + df.double())).clamp_(min=0.0).float()


def _normalise(counts: Tensor, idf: Tensor) -> Tensor:
    """Row-normalised TF-IDF of a block of word counts (in place)."""
    x = counts.mul_(idf)
    return x.div_(x.sum(1, keepdim=True).clamp_(min=1e-12))


def _document_frequency(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor],
                        g: torch.Generator) -> Tensor:
    """Documents containing each word, counted block by block (one block of counts in memory)."""
    df = torch.zeros(spec.num_features, dtype=torch.int64)
    counts = torch.empty(min(_FEATURE_BLOCK, spec.num_nodes), spec.num_features)
    for start, b in _blocks(spec.num_nodes):
        block = counts[:b].zero_()
        _count_block(spec, y[start:start + b], topics, g, block)
        df += (block > 0).sum(0)
    return df


def _feature_rows(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor], idf: Tensor,
                  g: torch.Generator) -> Iterator[Tensor]:
    """The feature rows, block by block (``g`` at the state where the features' draws start)."""
    for start, b in _blocks(spec.num_nodes):
        block = torch.zeros(b, spec.num_features)
        _count_block(spec, y[start:start + b], topics, g, block)
        yield _normalise(block, idf)


def _features(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor], g: torch.Generator) -> Tensor:
    """Row-normalised TF-IDF of documents drawn from a class topic mixed with a background, in memory:
    the same blocks as :func:`_document_frequency` and :func:`_feature_rows`, counted once."""
    n, f = spec.num_nodes, spec.num_features
    counts = torch.zeros(n, f, dtype=torch.float32)
    df = torch.zeros(f, dtype=torch.int64)
    for start, b in _blocks(n):
        block = counts[start:start + b]
        _count_block(spec, y[start:start + b], topics, g, block)
        df += (block > 0).sum(0)
    idf = _idf(df, n)
    for start, b in _blocks(n):
        _normalise(counts[start:start + b], idf)
    return counts


def _split(spec: SyntheticSpec, y: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    n = spec.num_nodes
    perm = torch.randperm(n, generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    y_perm = y[perm]
    for c in range(spec.num_classes):
        members = perm[y_perm == c]
        train[members[:spec.train_per_class]] = True
    rest = perm[~train[perm]]
    val = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    val[rest[:spec.num_val]] = True
    test[rest[spec.num_val:spec.num_val + spec.num_test]] = True
    return train, val, test
