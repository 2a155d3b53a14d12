"""Datasets behind one ``load_graph``: Planetoid and PubMed's topology with random features from the raw
Planetoid files, OGB (arxiv, products) and Reddit from their raw files, the GNN benchmark study's
co-purchase and co-authorship graphs from its ``.npz`` files
([`pipegnn.data.study_graphs`][pipegnn.data.study_graphs]), and embedded synthetic graphs.

Nothing read from the (writable) cache can execute code: no PyG or ogb dataset class is used (they
``torch.load`` their processed files with ``weights_only=False``), processed graphs are plain tensors
read with ``weights_only=True``, ``.npz`` files are read with ``allow_pickle=False``, and raw Planetoid
files, pickles by their format, go through a restricted unpickler; keep them in a trusted
``data.root`` all the same (see [`pipegnn.data.planetoid`][pipegnn.data.planetoid]). A cache folder that
cannot be written is no error: the graph is built in memory, with one warning.

With ``features="disk"`` (``data.features=disk``) the node features are kept in a feature file under
``<cache>/features/`` ([`pipegnn.data.features`][pipegnn.data.features]) instead of memory: a synthetic graph
writes them there block by block straight from its generator (the file is cached by the spec, so a graph
larger than memory never exists whole); a real graph is loaded whole once, as in memory mode, and its
features are written to the file once (cached by their content) and dropped from memory.
With ``edges="disk"`` (``data.edges=disk``) the graph carries an
[`EdgeMeta`][pipegnn.data.graph_store.EdgeMeta]: the edges' number, key (a synthetic graph's spec, else a hash
of the edges) and the folder ``<cache>/edges/<name>-<key>/`` where graph stores of them are kept; a synthetic
graph whose edges were drawn before restores the generator state saved there and has an empty
``edge_index``.
``features="sparse"`` keeps them in memory as a CSR matrix ([`pipegnn.sparse`][pipegnn.sparse]: bag-of-words
features, whose first transform is then a sparse product). ``features="none"`` gives the topology, labels
and split only (a pipeline rank that never reads features): a synthetic graph's features are not even
generated.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Mapping

import torch

from pipegnn.config.choices import DatasetName, Storage, names
from pipegnn.config.schema import DatasetConfig, PubmedTopologyConfig, StudyGraphConfig, SyntheticConfig
from pipegnn.config.typed import group_config
from pipegnn.data.features import STORAGE, FeatureMeta, cached_store
from pipegnn.data.graph import Graph
from pipegnn.data.graph_store import EdgeMeta
from pipegnn.data.planetoid import PLANETOID_NAMES, load_planetoid, load_pubmed_topology
from pipegnn.data.synthetic import (
    SyntheticSpec,
    feature_key,
    load_drawn,
    make_synthetic,
    save_drawn,
    topology_key,
)
from pipegnn.errors import ConfigError
from pipegnn.sparse import to_csr

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

#: Folder of the feature files under a dataset cache (``data.cache``).
FEATURES_DIR = "features"
#: Folder of the graph stores (``data.edges=disk``) under a dataset cache.
EDGES_DIR = "edges"

#: Large real graphs (pipegnn.data.large, imported on use: ogb pulls in scikit-learn).
LARGE_NAMES = ("ogbn-arxiv", "ogbn-products", "reddit")
#: Dataset names ``dataset.name`` accepts.
DATASETS = names(DatasetName)


def load_graph(dataset: DatasetConfig | Mapping[str, Any], root: str | Path | None, cache: str | Path,
               features: Storage | str = Storage.memory, edges: str = "memory") -> Graph:
    """Load the graph that a ``dataset`` config group describes.

    Args:
        dataset: the typed ``dataset`` config, or its keys (``name`` plus, for synthetic graphs,
            SyntheticSpec fields; for pubmed_topology the features' ``seed``; for the study's graphs
            the split), the rest from the dataset's YAML
            ([`pipegnn.config.typed.group_config`][pipegnn.config.typed.group_config]).
        root: read-only folder with raw files in each loader's layout (``<Name>/raw/...``), or None.
        cache: folder where loaders keep downloads and processed graphs (may be read-only, except
            with ``features="disk"``, which writes its feature file there).
        features: ``memory`` (``graph.x``), ``sparse`` (``graph.x`` a CSR matrix), ``disk`` (``graph.x``
            None, ``graph.features`` describes the feature file) or ``none`` (``graph.x`` None,
            ``graph.features`` only their shape).
        edges: ``memory`` or ``disk`` (``graph.edges`` describes them; a synthetic graph's drawn before are
            not drawn again).

    Raises:
        ConfigError: unknown dataset name or parameter, an invalid synthetic spec, or a feature file
            that cannot be written.
        DatasetUnavailable: files missing and not downloadable.
    """
    if features not in (*STORAGE, "none"):
        raise ConfigError(f"features={features!r} is not valid; valid: {', '.join((*STORAGE, 'none'))}")
    if edges not in ("memory", "disk"):
        raise ConfigError(f"edges={edges!r} is not valid; valid: memory, disk")
    config: DatasetConfig = group_config("dataset", dataset)
    name = str(config.name)
    if isinstance(config, SyntheticConfig):
        graph = _synthetic(config, cache, "memory" if features == "sparse" else features, edges)
        return dataclasses.replace(graph, x=to_csr(graph.x)) if features == "sparse" and graph.x is not None \
            else graph
    if isinstance(config, PubmedTopologyConfig):
        graph = load_pubmed_topology(root, cache, seed=config.seed)
    elif isinstance(config, StudyGraphConfig):
        from pipegnn.data.study_graphs import load_study_graph
        graph = load_study_graph(config, root, cache)
    elif name in PLANETOID_NAMES:
        graph = load_planetoid(name, root, cache)
    else:
        assert name in LARGE_NAMES, name  # every other DatasetName
        from pipegnn.data.large import load_large
        graph = load_large(name, root, cache)
    return stored(graph, cache, features, edges, name)


def stored(graph: Graph, cache: str | Path, features: Storage | str = Storage.memory, edges: str = "memory",
           name: str | None = None) -> Graph:
    """``graph`` (loaded, its features and edges in memory) with its features and edges kept as
    [`load_graph`][pipegnn.data.load_graph]'s ``features`` and ``edges`` say: a CSR matrix, a feature
    file in ``cache`` (keyed by the features), an edge folder there (keyed by the edges), described only.
    ``name`` names the cache's folders (the graph's name by default). What ``pipegnn.build(cfg, graph=...)``
    does with a graph given to it."""
    name = name or graph.name
    if edges == "disk":
        h = hashlib.sha1(graph.edge_index.contiguous().numpy().data)
        h.update(str(graph.num_nodes).encode())
        key = h.hexdigest()[:24]
        graph = dataclasses.replace(graph, edges=EdgeMeta(graph.num_edges, key,
                                                          Path(cache) / EDGES_DIR / f"{name}-{key[:16]}"))
    if features == "memory":
        return graph
    if features == "sparse":
        assert graph.x is not None  # every loader keeps the features in memory
        return dataclasses.replace(graph, x=to_csr(graph.x))
    x = graph.x
    assert x is not None  # every loader keeps the features in memory
    meta = FeatureMeta(x.size(0), x.size(1), x.dtype)
    if features == "disk":
        # the array's buffer (.data): numpy types ndarray as a buffer only from Python 3.12
        key = hashlib.sha1(x.contiguous().view(-1).view(torch.uint8).numpy().data).hexdigest()[:16]
        store = cached_store(Path(cache) / FEATURES_DIR / f"{name}-{key}", key,
                             lambda s: s.write([x], rows=x.size(0), cols=x.size(1), dtype=x.dtype, key=key))
        meta = store.meta()
    return dataclasses.replace(graph, x=None, features=meta)


def split_summary(dataset: DatasetConfig, graph: Graph) -> dict[str, Any]:
    """A record's account of the split a graph was loaded with: its kind (``public``: the dataset's own;
    ``generated``: drawn with a synthetic graph, by ``dataset.seed``; ``per_class`` or ``random``: drawn
    by ``dataset.split_seed``), that seed, and the sizes of the three parts."""
    if isinstance(dataset, StudyGraphConfig):
        kind, seed = str(dataset.split), dataset.split_seed
    elif isinstance(dataset, SyntheticConfig):
        kind, seed = "generated", dataset.seed
    else:
        kind, seed = "public", None
    return {"split": kind, "split_seed": seed, "train_nodes": int(graph.train_mask.sum()),
            "val_nodes": int(graph.val_mask.sum()), "test_nodes": int(graph.test_mask.sum())}


def _synthetic(dataset: SyntheticConfig, cache: str | Path, features: str, edges: str) -> Graph:
    params = {k: v for k, v in dataclasses.asdict(dataset).items() if k not in ("name", "preset")}
    spec = SyntheticSpec(**params)  # the schema has SyntheticSpec's fields
    name = dataset.preset or "synthetic"
    edge_key = topology_key(spec)
    folder = Path(cache) / EDGES_DIR / f"{name}-{edge_key[:16]}"
    saved = load_drawn(folder, edge_key) if edges == "disk" else None
    spec.check_room(edges=saved is None, features=features)  # a graph store's edges are read, not held
    drawn: dict[str, Any] = {}  # make_synthetic's keywords: skip the edges drawn before, or save the state
    if saved is not None:
        drawn = {"drawn": saved}
    elif edges == "disk":
        drawn = {"on_edges": lambda d: save_drawn(folder, edge_key, d)}
    if features != "disk":
        graph = make_synthetic(spec, name=name, features=features, **drawn)
    else:
        generated: list[Graph] = []  # the graph, when its features had to be written
        key = feature_key(spec)
        store = cached_store(Path(cache) / FEATURES_DIR / f"synthetic-{key}", key,
                             lambda s: generated.append(
                                 make_synthetic(spec, name=name, features="disk", store=s, **drawn)))
        graph = generated[0] if generated else dataclasses.replace(
            make_synthetic(spec, name=name, features="none", **drawn), features=store.meta())
    if edges != "disk":
        return graph
    num_edges = saved.num_edges if saved is not None else int(graph.edge_index.size(1))
    return dataclasses.replace(graph, edges=EdgeMeta(num_edges, edge_key, folder))
