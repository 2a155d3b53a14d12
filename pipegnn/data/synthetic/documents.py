"""The features of a synthetic graph: class-correlated bag-of-words documents, as row-normalised TF-IDF.

Each class's topic is a random tenth of the vocabulary (stored by its keywords only); a node's words
come from its class's topic with probability ``signal``, otherwise from a uniform background. Words are
counted in node blocks (vectorised, bounded temporaries); in memory the output dominates: N x F float32
(5M nodes x 128 features: 2.5 GB).

Features beyond memory (``features="disk"``) are written block by block and never exist whole. A row's
TF-IDF weight needs every row's word counts (the document frequencies), so the blocks' draws run twice
from the same generator state: a first pass counts the document frequencies
([`idf_weights`][pipegnn.data.synthetic.documents.idf_weights], which leaves the generator where
[`feature_matrix`][pipegnn.data.synthetic.documents.feature_matrix] leaves it), a second pass, replayed from
the saved state, counts, weighs and row-normalises each block
([`feature_rows`][pipegnn.data.synthetic.documents.feature_rows]). Both paths run the same per-block code, so
the values are identical; the price is drawing the features twice.
[`skip_features`][pipegnn.data.synthetic.documents.skip_features] makes the draws and discards them without
counting (a graph without features).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Iterator

import torch
from torch import Tensor

from pipegnn.data.synthetic.spec import FEATURE_BLOCK, SyntheticSpec

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

_FEATURES_VERSION = 1  # bump when the feature values of a spec change (keys cached feature files)


def feature_key(spec: SyntheticSpec) -> str:
    """Key of the feature values ``spec`` generates (feature files are cached by it)."""
    text = json.dumps({"generator": _FEATURES_VERSION, **asdict(spec)}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def class_topics(spec: SyntheticSpec, g: torch.Generator) -> tuple[Tensor, Tensor]:
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
    for start in range(0, n, FEATURE_BLOCK):
        yield start, min(FEATURE_BLOCK, n - start)


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


def skip_features(spec: SyntheticSpec, g: torch.Generator) -> None:
    """Advance ``g`` past the feature draws without counting anything."""
    for _, b in _blocks(spec.num_nodes):
        _draws(spec, b, g)


def _idf(df: Tensor, n: int) -> Tensor:
    """IDF weights of words found in ``df`` of ``n`` documents."""
    return torch.log(n / (1.0 + df.double())).clamp_(min=0.0).float()


def _normalise(counts: Tensor, idf: Tensor) -> Tensor:
    """Row-normalised TF-IDF of a block of word counts (in place)."""
    x = counts.mul_(idf)
    return x.div_(x.sum(1, keepdim=True).clamp_(min=1e-12))


def idf_weights(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor], g: torch.Generator) -> Tensor:
    """The IDF weight of every word: the documents containing each word, counted block by block (one
    block of counts in memory)."""
    df = torch.zeros(spec.num_features, dtype=torch.int64)
    counts = torch.empty(min(FEATURE_BLOCK, spec.num_nodes), spec.num_features)
    for start, b in _blocks(spec.num_nodes):
        block = counts[:b].zero_()
        _count_block(spec, y[start:start + b], topics, g, block)
        df += (block > 0).sum(0)
    return _idf(df, spec.num_nodes)


def feature_rows(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor], idf: Tensor,
                 g: torch.Generator) -> Iterator[Tensor]:
    """The feature rows, block by block (``g`` at the state where the features' draws start)."""
    for start, b in _blocks(spec.num_nodes):
        block = torch.zeros(b, spec.num_features)
        _count_block(spec, y[start:start + b], topics, g, block)
        yield _normalise(block, idf)


def feature_matrix(spec: SyntheticSpec, y: Tensor, topics: tuple[Tensor, Tensor],
                   g: torch.Generator) -> Tensor:
    """Row-normalised TF-IDF of documents drawn from a class topic mixed with a background, in memory:
    the same blocks as [`idf_weights`][pipegnn.data.synthetic.documents.idf_weights] and
    [`feature_rows`][pipegnn.data.synthetic.documents.feature_rows], counted once."""
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
