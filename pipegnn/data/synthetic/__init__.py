"""Embedded synthetic graphs: communities, class-correlated bag-of-words features, no download.

[`make_synthetic`][pipegnn.data.synthetic.make_synthetic] draws, from one generator seeded by the spec, each
node's community (its class is the community's modulo the classes), the edges
([`topology`][pipegnn.data.synthetic.topology]), the features
([`documents`][pipegnn.data.synthetic.documents]) and the Planetoid-style split, in that order; the parameters
are a [`SyntheticSpec`][pipegnn.data.synthetic.spec.SyntheticSpec] ([`spec`][pipegnn.data.synthetic.spec]).
With ``features="disk"`` the features are written block by block into a feature file
([`pipegnn.data.features`][pipegnn.data.features]) and never exist whole; with ``features="none"`` their draws
are made and discarded without counting (only the split depends on them): topology, labels and split alone.

With ``data.edges=disk`` the edges are drawn once: the generator's state after them is saved beside the
graph stores built from them ([`save_drawn`][pipegnn.data.synthetic.save_drawn]), and a later generation
that finds it restores it instead of drawing the edges (``edge_index`` is then ``[2, 0]``; everything else
is the same), so that a run whose graph stores are built never holds the edge list.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from pipegnn.atomic import atomic_path
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
from pipegnn.data.synthetic.topology import TOPOLOGY_VERSION, community_edges
from pipegnn.integrity import stream_checksum
from pipegnn.jsonfile import read_json

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

#: File of the saved generator state in a graph store folder.
DRAWN_FILE = "drawn-edges.json"


@dataclass(frozen=True)
class DrawnEdges:
    """What drawing a synthetic graph's edges leaves: their number and the generator's state after them
    (``torch.Generator.get_state()``), which a generation that skips them restores."""

    num_edges: int
    state: Tensor


def topology_key(spec: SyntheticSpec) -> str:
    """Key of the edges ``spec`` generates (what ``data.edges=disk`` keys their graph stores by)."""
    text = json.dumps({"topology": TOPOLOGY_VERSION, **asdict(spec)}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:24]


def save_drawn(folder: Path, key: str, drawn: DrawnEdges) -> None:
    """Save ``drawn`` for the edges of key ``key`` in ``folder`` (atomically; a folder that cannot be
    written only warns: the edges are drawn again next time)."""
    data = drawn.state.numpy().tobytes()
    state = {"format": 1, "key": key, "num_edges": drawn.num_edges, "state": data.hex(),
             "checksum": stream_checksum([data])}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / DRAWN_FILE) as tmp:
            Path(tmp).write_text(json.dumps(state))
    except OSError as e:
        log.warning("cannot save the synthetic graph's drawn edges in %s (%s); they are drawn every run",
                    folder, e)


def load_drawn(folder: Path, key: str) -> DrawnEdges | None:
    """The [`DrawnEdges`][pipegnn.data.synthetic.DrawnEdges] saved in ``folder`` for ``key``, or None
    (missing; damaged or another key's, with a warning)."""
    path = folder / DRAWN_FILE
    if not path.is_file():
        return None
    try:
        state = read_json(path)
        data = bytes.fromhex(state["state"])
        if state.get("format") != 1 or state.get("key") != key or type(state.get("num_edges")) is not int:
            raise ValueError(f"format {state.get('format')!r}, key {state.get('key')!r}, expected {key!r}")
        if stream_checksum([data]) != state.get("checksum"):
            raise ValueError("content checksum does not match")
        return DrawnEdges(state["num_edges"], torch.frombuffer(bytearray(data), dtype=torch.uint8))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("ignoring %s (%s); drawing the edges", path, e)
        return None


def make_synthetic(spec: SyntheticSpec, name: str = "synthetic", *, features: str = "memory",
                   store: DiskFeatureStore | None = None, drawn: DrawnEdges | None = None,
                   on_edges: Callable[[DrawnEdges], Any] | None = None) -> Graph:
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
        drawn: the edges drawn before (their graph stores hold them): not drawn again, ``edge_index`` is
            ``[2, 0]``.
        on_edges: called with the [`DrawnEdges`][pipegnn.data.synthetic.DrawnEdges] once the edges are drawn.
    """
    if features not in ("memory", "disk", "none") or (features == "disk") != (store is not None):
        raise ValueError(f"features={features!r} (store {store!r}): memory, none, or disk with a store")
    g = torch.Generator().manual_seed(spec.seed)
    n = spec.num_nodes
    community = torch.randint(spec.num_communities, (n,), generator=g)
    y = community % spec.num_classes
    if drawn is None:
        edge_index = community_edges(spec, community, g)
        if on_edges is not None:
            on_edges(DrawnEdges(edge_index.size(1), g.get_state()))
    else:
        edge_index = torch.empty(2, 0, dtype=torch.long)
        g.set_state(drawn.state)
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
