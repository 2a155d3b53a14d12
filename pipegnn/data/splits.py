"""Splits drawn per seed, for graphs without a standard one (``dataset.split``):

- ``per_class``: the GNN benchmark study's protocol, ``train_per_class`` training and ``val_per_class``
  validation nodes drawn from each class, every other node a test node;
- ``random``: ``train_fraction`` and ``val_fraction`` of all nodes, the rest test (a dense split, where
  most nodes are targets, for time studies).

Drawn with NumPy's seeded generator, so a split depends on its seed and the labels alone.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pipegnn.config.choices import Split
from pipegnn.errors import ConfigError

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)


def draw_split(y: Tensor, split: Split | str, seed: int, *, train_per_class: int, val_per_class: int,
               train_fraction: float, val_fraction: float) -> tuple[Tensor, Tensor, Tensor]:
    """Train, validation and test masks over the nodes labelled ``y``, drawn with ``seed``.

    Raises:
        ConfigError: an unknown split, sizes out of range, or (``per_class``) a class with fewer nodes
            than ``train_per_class + val_per_class``.
    """
    if not 0 <= seed < 2**32:
        raise ConfigError(f"dataset.split_seed={seed} is not valid; valid: an integer in [0, 2**32)")
    rng = np.random.default_rng(seed)
    labels = y.numpy()
    n = labels.size
    if split == Split.per_class:
        if train_per_class < 1 or val_per_class < 0:
            raise ConfigError(f"dataset.train_per_class={train_per_class} and dataset.val_per_class="
                              f"{val_per_class} are not valid; valid: at least 1 and at least 0")
        counts = np.bincount(labels)
        short = [c for c in range(counts.size) if 0 < counts[c] < train_per_class + val_per_class]
        if short:
            raise ConfigError(
                f"dataset.split=per_class needs {train_per_class} + {val_per_class} nodes of each class; "
                f"class(es) {short} have only {[int(counts[c]) for c in short]}: lower "
                f"dataset.train_per_class / dataset.val_per_class, or use dataset.split=random")
        train, val = [], []
        for c in np.flatnonzero(counts):
            nodes = rng.permutation(np.flatnonzero(labels == c))
            train.append(nodes[:train_per_class])
            val.append(nodes[train_per_class:train_per_class + val_per_class])
        train_ids, val_ids = np.concatenate(train), np.concatenate(val)
    elif split == Split.random:
        if not (0 < train_fraction and 0 <= val_fraction and train_fraction + val_fraction < 1):
            raise ConfigError(f"dataset.train_fraction={train_fraction} and dataset.val_fraction="
                              f"{val_fraction} are not valid; valid: train > 0, val >= 0, together < 1")
        order = rng.permutation(n)
        n_train, n_val = round(train_fraction * n), round(val_fraction * n)
        train_ids, val_ids = order[:n_train], order[n_train:n_train + n_val]
    else:
        raise ConfigError(f"dataset.split={split!r} is not valid; valid: {', '.join(s.value for s in Split)}")
    train_mask = torch.zeros(n, dtype=torch.bool)
    val_mask = torch.zeros(n, dtype=torch.bool)
    train_mask[torch.from_numpy(train_ids)] = True
    val_mask[torch.from_numpy(val_ids)] = True
    return train_mask, val_mask, ~(train_mask | val_mask)
