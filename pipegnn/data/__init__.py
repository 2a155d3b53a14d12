"""Datasets behind one ``load_graph``: Planetoid and PubMed's topology with random features from the raw
Planetoid files, OGB (arxiv, products) and Reddit from their raw files, and embedded synthetic graphs.

Nothing read from the (writable) cache can execute code: no PyG or ogb dataset class is used (they
``torch.load`` their processed files with ``weights_only=False``), processed graphs are plain tensors
read with ``weights_only=True``, ``.npz`` files are read with ``allow_pickle=False``, and raw Planetoid
files, pickles by their format, go through a restricted unpickler; keep them in a trusted
``data.root`` all the same (see :mod:`pipegnn.data.planetoid`). A cache folder that cannot be written
is no error: the graph is built in memory, with one warning.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pipegnn.data.graph import Graph
from pipegnn.data.planetoid import PLANETOID_NAMES, load_planetoid, load_pubmed_topology
from pipegnn.data.synthetic import SyntheticSpec, make_synthetic
from pipegnn.errors import ConfigError

__all__ = ["DATASETS", "Graph", "SyntheticSpec", "load_graph", "make_synthetic"]

#: Large real graphs (pipegnn.data.large, imported on use: ogb pulls in scikit-learn).
LARGE_NAMES = ("ogbn-arxiv", "ogbn-products", "reddit")
#: Dataset names ``dataset.name`` accepts.
DATASETS = (*PLANETOID_NAMES, "pubmed_topology", *LARGE_NAMES, "synthetic")


def load_graph(dataset: Mapping[str, Any], root: str | Path | None, cache: str | Path) -> Graph:
    """Load the graph that a ``dataset`` config group describes.

    Args:
        dataset: the ``dataset`` config (``name`` plus, for synthetic graphs, SyntheticSpec fields; for
            pubmed_topology an optional feature ``seed``).
        root: read-only folder with raw files in each loader's layout (``<Name>/raw/...``), or None.
        cache: folder where loaders keep downloads and processed graphs (may be read-only).

    Raises:
        ConfigError: unknown dataset name or synthetic parameter, or an invalid synthetic spec.
        DatasetUnavailable: files missing and not downloadable.
    """
    name = dataset["name"]
    if name in PLANETOID_NAMES:
        return load_planetoid(name, root, cache)
    if name == "pubmed_topology":
        return load_pubmed_topology(root, cache, seed=int(dataset.get("seed", 0)))
    if name in LARGE_NAMES:
        from pipegnn.data.large import load_large
        return load_large(name, root, cache)
    if name == "synthetic":
        params = {k: v for k, v in dataset.items() if k not in ("name", "preset")}
        try:
            spec = SyntheticSpec(**params)
        except TypeError as e:
            raise ConfigError(f"dataset=synthetic: {e}; valid parameters: "
                              f"{sorted(SyntheticSpec.__dataclass_fields__)}") from e
        return make_synthetic(spec, name=str(dataset.get("preset", "synthetic")))
    raise ConfigError(f"unknown dataset {name!r}; valid: {', '.join(DATASETS)}")
