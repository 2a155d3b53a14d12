"""Raw Planetoid files of the wrong shape are refused before anything is densified or trained: each
file's declared shape against the published one, and the files against each other."""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import scipy.sparse as sp

from pipegnn.data.planetoid import load_planetoid
from pipegnn.errors import DatasetUnavailable


def _lines(path: Path, edit: Callable[[list[str]], list[str]]) -> None:
    path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")


def _first(lines: list[str], value: str) -> list[str]:
    return [value, *lines[1:]]


def _huge_declared_shape(raw: Path) -> None:
    """A tiny CSR matrix (one entry) declaring 140 x 60,000,000: 31 GiB once dense."""
    m = sp.csr_matrix((np.ones(1, np.float32), np.array([0], np.int32), np.array([0] + [1] * 140, np.int32)),
                      shape=(140, 2))
    m._shape = (140, 60_000_000)
    with open(raw / "ind.cora.x", "wb") as f:
        pickle.dump(m, f, protocol=4)


def _repickle(raw: Path, part: str, edit: Callable[[np.ndarray], None]) -> None:
    """ind.cora.<part> read, edited as a dense array, and written back as one."""
    from pipegnn.data.planetoid import read_raw

    matrix = read_raw(raw, "cora", part).numpy().copy()
    edit(matrix)
    with open(raw / f"ind.cora.{part}", "wb") as f:
        pickle.dump(matrix, f, protocol=4)


class _Declared:
    """Pickles as numpy pickles an array, declaring ``shape`` and carrying no data."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def __reduce__(self):  # noqa: ANN204
        from pipegnn.data.planetoid_pickle import _reconstruct

        return _reconstruct, (np.ndarray, (0,), "b"), (1, self.shape, np.dtype(np.float32), False, "")


def _called(outer: bytes | None, n: int) -> bytes:
    """A protocol-2 pickle calling ``numpy.ndarray((n,), 'u1')`` (REDUCE), its result passed to the global
    ``outer`` (``module\\nname\\n``) when given."""
    array = b"cnumpy\nndarray\n(J" + n.to_bytes(4, "little") + b"\x85U\x02u1tR"
    return b"\x80\x02" + (b"c" + outer + array + b"\x85R." if outer else array + b".")


def _tiny_file_declaring_a_huge_array(raw: Path) -> None:
    with open(raw / "ind.cora.x", "wb") as f:
        pickle.dump(_Declared((140, 10**9)), f, protocol=2)


def _csr_whose_indices_declare_a_huge_array(raw: Path) -> None:
    m = sp.csr_matrix((np.ones(1, np.float32), np.array([0], np.int32), np.array([0] + [1] * 140, np.int32)),
                      shape=(140, 1433))
    m.indices = _Declared((10**12,))
    with open(raw / "ind.cora.x", "wb") as f:
        pickle.dump(m, f, protocol=2)


def _shared_neighbour_lists(raw: Path, nodes: int = 2708, shared: int = 2000) -> None:
    """One list, every node's: 5.4 M edges from a few KB (or, with 100,000 nodes and ids, 10**10 ids
    that were walked one by one before they were counted)."""
    common = list(range(shared))
    with open(raw / "ind.cora.graph", "wb") as f:
        pickle.dump({node: common for node in range(nodes)}, f, protocol=2)


CASES = {
    # the examples: ind.cora.y replaced by ind.cora.ty, a test.index cut short, a huge declared shape
    "y is ty": ("cora", lambda raw: shutil.copyfile(raw / "ind.cora.ty", raw / "ind.cora.y"),
                "ind.cora.y: a 1000 x 7 matrix, the published ind.*.y is 140 x 7"),
    "test.index cut short": ("cora", lambda raw: _lines(raw / "ind.cora.test.index", lambda ls: ls[:900]),
                             "900 test ids, the published file has 1000"),
    "huge declared shape": ("cora", _huge_declared_shape, "a 140 x 60000000 matrix"),
    # not named there: ally replaced by y, a repeated test id, a CiteSeer test id far past the graph
    "ally is y": ("cora", lambda raw: shutil.copyfile(raw / "ind.cora.y", raw / "ind.cora.ally"),
                  "ind.cora.ally: a 140 x 7 matrix, the published ind.*.ally is 1708 x 7"),
    "repeated test id": ("cora", lambda raw: _lines(raw / "ind.cora.test.index",
                                                    lambda ls: [ls[0], ls[0], *ls[2:]]),
                         "ind.cora.test.index repeats ids"),
    "far test id": ("citeseer", lambda raw: _lines(raw / "ind.citeseer.test.index",
                                                   lambda ls: _first(ls, "1000000000")),
                    "ind.citeseer.test.index holds ids from 2312 to 1000000000, outside the test nodes'"),
    # bounded before anything is allocated: a tiny file declaring a huge array (as the feature matrix, or
    # inside a CSR matrix), a few KB of shared neighbour lists
    "huge array in a tiny file": ("cora", _tiny_file_declaring_a_huge_array,
                                  "declares (140, 1000000000) of float32 (560,000,000,000 bytes) but "
                                  "carries 0"),
    "huge array inside a csr": ("cora", _csr_whose_indices_declare_a_huge_array,
                                "declares (1000000000000,) of float32"),
    "shared neighbour lists": ("cora", _shared_neighbour_lists, "its nodes share neighbour lists"),
    "10**10 shared neighbour ids": ("cora", lambda raw: _shared_neighbour_lists(raw, 100_000, 100_000),
                                    "its nodes share neighbour lists"),
    "a test.index of 10 M lines": ("cora", lambda raw: (raw / "ind.cora.test.index").write_text(
        "2000\n" * 10**7), "more than a test.index of this graph holds"),
    # labels that are no one-hot rows would train as class 0; features that are not finite fail late
    "a label row of zeros": ("cora", lambda raw: _repickle(raw, "ally", lambda m: m[5].__setitem__(..., 0)),
                             "ind.cora.ally: row 5 is no one-hot label ([0.0, 0.0, 0.0"),
    "a label row of ones": ("cora", lambda raw: _repickle(raw, "y", lambda m: m[0].__setitem__(..., 1)),
                            "ind.cora.y: row 0 is no one-hot label ([1.0, 1.0"),
    "NaN in allx": ("cora", lambda raw: _repickle(raw, "allx", lambda m: m[3].__setitem__(7, np.nan)),
                    "ind.cora.allx: row 3 holds NaN or an infinity"),
    "inf in tx": ("cora", lambda raw: _repickle(raw, "tx", lambda m: m[9].__setitem__(0, np.inf)),
                  "ind.cora.tx: row 9 holds NaN or an infinity"),
    # found by probing: list(numpy.ndarray((N,), 'u1')) in 51 bytes built N numpy scalars (N = 6e7: 20 s,
    # 2.8 GB): an array is never built from a shape a file names, and list is never called on anything
    "a list of an array built from a shape": ("cora", lambda raw: (raw / "ind.cora.x").write_bytes(
        _called(b"__builtin__\nlist\n", 1000)), "builds an array of shape (1000,) from nothing but its "
                                                  "shape"),
    "a list built by a call": ("cora", lambda raw: (raw / "ind.cora.x").write_bytes(
        b"\x80\x02c__builtin__\nlist\n(K\x01K\x02t\x85R."), "calls list on something"),
    # found by probing: a 12-byte pickle declaring a 1 TiB string was an `oom` record with an empty message
    "a 1 TiB string in 12 bytes": ("cora", lambda raw: (raw / "ind.cora.x").write_bytes(
        b"\x80\x04\x8d\x00\x00\x00\x00\x00\x01\x00\x00abc"), "(MemoryError"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_raw_files_of_the_wrong_shape_are_refused(case: str, data_root: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    name, harm, message = CASES[case]
    folder = {"cora": "Cora", "citeseer": "CiteSeer"}[name]
    shutil.copytree(data_root / folder, tmp_path / folder)
    harm(tmp_path / folder / "raw")
    todense = sp.csr_matrix.todense

    def bounded(self, *args, **kwargs):  # nothing of a declared shape is densified before it is checked
        assert self.shape[0] * self.shape[1] < 10**8, f"densifying a declared {self.shape}"
        return todense(self, *args, **kwargs)

    monkeypatch.setattr(sp.csr_matrix, "todense", bounded)
    with pytest.raises(DatasetUnavailable, match="not valid Planetoid files") as refused:
        load_planetoid(name, tmp_path, tmp_path / "cache")
    assert message in str(refused.value)


def test_the_published_files_load(data_root: Path, tmp_path: Path) -> None:
    for name, sizes in (("cora", (140, 500, 1000, 2708)), ("citeseer", (120, 500, 1000, 3327))):
        g = load_planetoid(name, data_root, tmp_path)
        assert (int(g.train_mask.sum()), int(g.val_mask.sum()), int(g.test_mask.sum()), g.num_nodes) == sizes
