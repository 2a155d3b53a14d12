"""Embedded synthetic graphs: communities, class-correlated bag-of-words features, no download.

Vectorised generation (no Python loop over nodes or edges); features are built in node blocks so that
graphs of millions of nodes fit in memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, to_undirected

from pipegnn.data.graph import Graph

__all__ = ["SyntheticSpec", "make_synthetic"]

_FEATURE_BLOCK = 65536  # nodes per block when building features


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a synthetic graph (defaults: PubMed-shaped).

    Attributes:
        num_nodes: number of nodes.
        avg_degree: mean number of directed edges per node (both directions of an undirected edge count).
        num_features: vocabulary size of the bag-of-words features.
        num_classes: number of classes; community ``c`` has class ``c % num_classes``.
        num_communities: number of communities (dense blocks of the graph).
        homophily: probability that an edge stays inside its source's community.
        power_law: exponent of the expected-degree distribution (e.g. 2.5) or None for uniform.
        words_per_node: words drawn per node's document.
        signal: probability that a word comes from the node's class topic rather than the background.
        train_per_class, num_val, num_test: split sizes (Planetoid style).
        seed: generator seed; the graph is a pure function of the spec.
    """

    num_nodes: int = 19717
    avg_degree: float = 4.5
    num_features: int = 500
    num_classes: int = 3
    num_communities: int = 30
    homophily: float = 0.7
    power_law: float | None = None
    words_per_node: int = 50
    signal: float = 0.07
    train_per_class: int = 20
    num_val: int = 500
    num_test: int = 1000
    seed: int = 0


def make_synthetic(spec: SyntheticSpec, name: str = "synthetic") -> Graph:
    """Generate the graph described by ``spec`` (deterministic for a given spec)."""
    g = torch.Generator().manual_seed(spec.seed)
    n = spec.num_nodes
    community = torch.randint(spec.num_communities, (n,), generator=g)
    y = community % spec.num_classes
    edge_index = _edges(spec, community, g)
    x = _features(spec, y, g)
    train, val, test = _split(spec, y, g)
    return Graph(name=name, x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=val,
                 test_mask=test, num_classes=spec.num_classes)


def _node_weights(spec: SyntheticSpec, g: torch.Generator) -> Tensor | None:
    """Expected-degree weights of a Chung-Lu power law (random node order), or None for uniform."""
    if spec.power_law is None:
        return None
    rank = torch.randperm(spec.num_nodes, generator=g).double() + 1.0
    return rank.pow(-1.0 / (spec.power_law - 1.0))


def _sample(weights: Tensor | None, count: int, g: torch.Generator, high: int) -> Tensor:
    """``count`` indices in ``[0, high)``, uniform or proportional to ``weights`` (inverse CDF)."""
    if weights is None:
        return torch.randint(high, (count,), generator=g)
    cdf = weights.cumsum(0)
    u = torch.rand(count, generator=g, dtype=torch.float64) * cdf[-1]
    return torch.searchsorted(cdf, u).clamp_(max=high - 1)


def _edges(spec: SyntheticSpec, community: Tensor, g: torch.Generator) -> Tensor:
    n = spec.num_nodes
    target = int(round(n * spec.avg_degree / 2))  # undirected edges
    draws = int(target * 1.05) + 16  # a few extra to replace duplicates and self-loops
    weights = _node_weights(spec, g)
    src = _sample(weights, draws, g, n)
    # Inside the source's community: pick a uniform member via the community-sorted node order.
    order = torch.argsort(community, stable=True)
    sizes = torch.bincount(community, minlength=spec.num_communities)
    starts = sizes.cumsum(0) - sizes
    c = community[src]
    inside = order[starts[c] + (torch.rand(draws, generator=g) * sizes[c]).long().clamp_(max=n - 1)]
    outside = _sample(weights, draws, g, n)
    dst = torch.where(torch.rand(draws, generator=g) < spec.homophily, inside, outside)
    keep = src != dst
    lo, hi = torch.minimum(src[keep], dst[keep]), torch.maximum(src[keep], dst[keep])
    pairs = torch.unique(lo * n + hi)
    pairs = pairs[torch.randperm(pairs.numel(), generator=g)[:target]]
    edge_index = torch.stack([pairs // n, pairs % n])
    return coalesce(to_undirected(edge_index, num_nodes=n), num_nodes=n)


def _features(spec: SyntheticSpec, y: Tensor, g: torch.Generator) -> Tensor:
    """Row-normalised TF-IDF of documents drawn from a class topic mixed with a background."""
    n, f, words = spec.num_nodes, spec.num_features, spec.words_per_node
    # Each class has a topic: a random tenth of the vocabulary, Zipf-weighted.
    keywords = max(1, f // 10)
    topics = torch.zeros(spec.num_classes, f, dtype=torch.float64)
    zipf = 1.0 / torch.arange(1, keywords + 1, dtype=torch.float64)
    for c in range(spec.num_classes):
        topics[c, torch.randperm(f, generator=g)[:keywords]] = zipf
    cdf = (topics / topics.sum(1, keepdim=True)).cumsum(1)
    counts = torch.empty(n, f, dtype=torch.float32)
    for start in range(0, n, _FEATURE_BLOCK):
        yb = y[start:start + _FEATURE_BLOCK]
        b = yb.numel()
        u = torch.rand(b, words, generator=g, dtype=torch.float64)
        topical = torch.empty(b, words, dtype=torch.long)
        for c in range(spec.num_classes):
            rows = yb == c
            topical[rows] = torch.searchsorted(cdf[c], u[rows]).clamp_(max=f - 1)
        background = torch.randint(f, (b, words), generator=g)
        word = torch.where(torch.rand(b, words, generator=g) < spec.signal, topical, background)
        flat = (torch.arange(b).unsqueeze(1) * f + word).view(-1)
        counts[start:start + b] = torch.bincount(flat, minlength=b * f).view(b, f).float()
    df = (counts > 0).sum(0).double()
    idf = torch.log(n / (1.0 + df)).clamp_(min=0.0).float()
    x = counts.mul_(idf)
    return x.div_(x.sum(1, keepdim=True).clamp_(min=1e-12))


def _split(spec: SyntheticSpec, y: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    n = spec.num_nodes
    if spec.train_per_class * spec.num_classes + spec.num_val + spec.num_test > n:
        raise ValueError(f"split sizes ({spec.train_per_class} per class x {spec.num_classes} classes, "
                         f"{spec.num_val} val, {spec.num_test} test) exceed num_nodes={n}")
    perm = torch.randperm(n, generator=g)
    train = torch.zeros(n, dtype=torch.bool)
    for c in range(spec.num_classes):
        members = perm[y[perm] == c]
        train[members[:spec.train_per_class]] = True
    rest = perm[~train[perm]]
    val = torch.zeros(n, dtype=torch.bool)
    test = torch.zeros(n, dtype=torch.bool)
    val[rest[:spec.num_val]] = True
    test[rest[spec.num_val:spec.num_val + spec.num_test]] = True
    return train, val, test
