"""Embedded synthetic graphs: communities, class-correlated bag-of-words features, no download.

[`make_synthetic`][pipegnn.data.synthetic.make_synthetic] draws, from one generator seeded by the spec, each
node's community (its class is the community's modulo the classes), the edges
([`topology`][pipegnn.data.synthetic.topology]), the features
([`documents`][pipegnn.data.synthetic.documents]) and the Planetoid-style split, in that order; the parameters
are a [`SyntheticSpec`][pipegnn.data.synthetic.spec.SyntheticSpec] ([`spec`][pipegnn.data.synthetic.spec]).
With ``features="disk"`` the features are written block by block into a feature file
([`pipegnn.data.features`][pipegnn.data.features]) and never exist whole; with ``features="none"`` their draws
are made and discarded without counting (only the split depends on them): topology, labels and split alone.
"""
from __future__ import annotations

import torch
from torch import Tensor

from pipegnn.data.features import DiskFeatureStore, FeatureMeta
from pipegnn.data.graph import Graph
from pipegnn.data.synthetic.documents import (
    class_topics,
    feature_key,
    feature_matrix,
    feature_rows,
    idf_weights,
    skip_features,
)
from pipegnn.data.synthetic.spec import DEFAULT_AVG_DEGREE, SyntheticSpec
from pipegnn.data.synthetic.topology import community_edges

__all__ = ["DEFAULT_AVG_DEGREE", "SyntheticSpec", "feature_key", "make_synthetic"]


def make_synthetic(spec: SyntheticSpec, name: str = "synthetic", *, features: str = "memory",
                   store: DiskFeatureStore | None = None) -> Graph:
    """Generate the graph described by ``spec`` (deterministic for a given spec).

    Args:
        spec: the graph's parameters.
        name: the graph's name.
        features: ``memory`` (``x`` holds them), ``disk`` (written block by block into ``store``,
            keyed by [`feature_key`][pipegnn.data.synthetic.documents.feature_key]; ``x`` is None and
            ``features`` describes the file) or ``none`` (not generated: ``x`` is None and ``features`` holds
            only their shape and dtype). The topology, labels, split and feature values are the same in every
            mode.
        store: where ``disk`` writes them.
    """
    if features not in ("memory", "disk", "none") or (features == "disk") != (store is not None):
        raise ValueError(f"features={features!r} (store {store!r}): memory, none, or disk with a store")
    g = torch.Generator().manual_seed(spec.seed)
    n = spec.num_nodes
    community = torch.randint(spec.num_communities, (n,), generator=g)
    y = community % spec.num_classes
    edge_index = community_edges(spec, community, g)
    topics = class_topics(spec, g)
    start = g.get_state()
    x, meta = None, FeatureMeta(n, spec.num_features, torch.float32)
    if features == "memory":
        x = feature_matrix(spec, y, topics, g)
    elif features == "disk":
        idf = idf_weights(spec, y, topics, g)
    else:
        skip_features(spec, g)
    train, val, test = _split(spec, y, g)  # the generator is where the in-memory features leave it
    if store is not None:
        replay = torch.Generator()
        replay.set_state(start)
        store.write(feature_rows(spec, y, topics, idf, replay), rows=n, cols=spec.num_features,
                    dtype=torch.float32, key=feature_key(spec))
        meta = store.meta()
    return Graph(name=name, x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=val,
                 test_mask=test, num_classes=spec.num_classes, features=None if x is not None else meta)


def _split(spec: SyntheticSpec, y: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Train (``train_per_class`` of each class), validation and test masks of a random node order."""
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
