"""The topology of a synthetic graph: communities joined by random edges, optionally with power-law
degrees (Chung-Lu).

Vectorised (no Python loop over nodes or edges) with bounded temporaries: edges are drawn in chunks of
int32 node ids, deduplicated with one in-place sort, and the undirected edge list is built without a
second coalesce. In memory the output dominates: the [2, E] int64 edge list (50M directed edges: 0.8 GB).
"""
from __future__ import annotations

import logging

import torch
from torch import Tensor

from pipegnn.data.synthetic.spec import SyntheticSpec
from pipegnn.edges import sorted_unique
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: Version of the edge draws: bump when a spec's edges (or the random numbers they take) change, which
#: invalidates the generator states saved after them (``data.edges=disk``).
TOPOLOGY_VERSION = 1

_CHUNK = 1 << 22  # edge draws per chunk (does not change the random stream)
_TOP_UP_ROUNDS = 32  # extra draw rounds when duplicates left fewer distinct edges than requested


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


def community_edges(spec: SyntheticSpec, community: Tensor, g: torch.Generator) -> Tensor:
    """The ``[2, E]`` int64 undirected edge list (both directions, sorted by source then target, no
    self-loops or duplicates) of ``spec.num_undirected_edges`` edges over nodes in ``community``.

    Raises:
        ConfigError: more edges than a simple graph on ``spec.num_nodes`` nodes has.
    """
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
