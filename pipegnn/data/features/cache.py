"""Feature files built once and reused: a dataset's features in node order
([`cached_store`][pipegnn.data.features.cache.cached_store]), and a copy of them ordered by a partition
([`partition_ordered`][pipegnn.data.features.cache.partition_ordered]).

**Renumbering by partition.** The graph's loader writes the features once in node order (a synthetic
graph straight from its generator, block by block; a real graph, which is loaded whole once, from its
in-memory matrix), cached per dataset. Training then reads a second copy whose rows are ordered by the
training plan's partition (each part's nodes contiguous, ascending ids within a part), written once per
(source file, partition) by streaming blocks of rows from the first, so that a micro-batch, whose rows
are mostly its own part's, reads a few long runs. Node ids do not change anywhere (plans, labels,
outputs): the copy's sidecar carries its row order, and the store maps node ids to file rows on every
read.

A cached file that does not match its sidecar or was built for another key is rebuilt with a warning,
as [`pipegnn.data.graph`][pipegnn.data.graph] does with cached graphs. Content is checked against its
checksums where it is about to be read: the partition-ordered copy that training reads, once per run (rebuilt
when damaged), and the node-order file when a copy is built from it (a damaged one is then an error naming
it); a run that finds its copy reads the node-order file not at all. The check reads the whole file:
``results/benchmarks/integrity.txt`` for what it costs.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from pipegnn.atomic import clean_stale_temporaries
from pipegnn.data.features.files import ATTR, FORMAT, GROUP, read_sidecar
from pipegnn.data.features.store import DiskFeatureStore
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

log = logging.getLogger(__name__)

_BLOCK_BYTES = 64 << 20  # rows streamed per block when copying a file: about this many bytes


def cached_store(folder: str | Path, key: str, write: Callable[[DiskFeatureStore], Any]) -> DiskFeatureStore:
    """The store in ``folder`` when its node features were built for ``key``; otherwise ``write(store)``
    builds them (a present file that does not match is rebuilt, with a warning).

    Raises:
        ConfigError: the folder cannot be written (``data.features=disk`` needs a writable cache).
    """
    folders = [Path(folder), *(p for p in Path(folder).glob("part-*") if p.is_dir())] \
        if Path(folder).is_dir() else []
    for stale in (s for where in folders for s in clean_stale_temporaries(where)):  # partition copies too
        log.info("removed %s, a temporary file of a killed write", stale)
    store = DiskFeatureStore(folder)
    why = store.check(key=key)
    if why is None:
        return store
    if store.exists():
        log.warning("ignoring cached feature file in %s (%s); rebuilding it", folder, why)
    try:
        write(store)
    except OSError as e:
        raise ConfigError(f"data.features=disk: the feature file cannot be written under {folder} ({e}); "
                          "make data.cache writable or use data.features=memory") from e
    return store


def partition_ordered(source: DiskFeatureStore, part: Tensor, dtype: torch.dtype | None = None
                      ) -> tuple[DiskFeatureStore, bool]:
    """The node features of ``source`` in a copy whose rows are ordered by ``part`` (the ``[N]`` part id
    of every node: each part's nodes contiguous, ascending node ids within a part), in ``dtype`` (None:
    the source's), in ``<source folder>/part-<key>``. Built once per source file, partition and dtype,
    by streaming blocks of rows from the source (never the whole matrix at once); reused afterwards.

    Returns:
        The store and whether it was already there. When the folder cannot be written, the source
        itself (node order), with a warning.
    """
    meta = source.meta()
    dtype = dtype or meta.dtype
    part = part.to(torch.int64).contiguous()
    if part.shape != (meta.rows,):
        raise ValueError(f"partition of {part.numel()} nodes for features of {meta.rows} nodes")
    source_key = read_sidecar(source.folder, GROUP, ATTR).get("key")
    h = hashlib.sha1(json.dumps({"format": FORMAT, "source": source_key, "dtype": str(dtype)}).encode())
    h.update(part.numpy().tobytes())
    key = h.hexdigest()[:24]
    store = DiskFeatureStore(source.folder / f"part-{key[:16]}")
    why = store.check(key=key, verify=True)
    if why is None:
        return store, True
    if store.exists():
        log.warning("ignoring partition-ordered feature file in %s (%s); rebuilding it", store.folder, why)
    order = torch.argsort(part, stable=True)
    block = max(1, _BLOCK_BYTES // max(1, meta.cols * meta.dtype.itemsize))
    blocks = (source.get_tensor(GROUP, ATTR, index=order[s:s + block]) for s in range(0, meta.rows, block))
    try:
        store.write(blocks, rows=meta.rows, cols=meta.cols, dtype=dtype, order=order, key=key)
    except OSError as e:
        log.warning("feature cache folder %s cannot be written (%s); reading the features in node order",
                    store.folder, e)
        return source, False
    return store, False
