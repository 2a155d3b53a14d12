"""The restricted unpickler of raw Planetoid files (``ind.<name>.<part>``, Python 2 pickles of numpy arrays,
scipy CSR matrices and an adjacency ``defaultdict(list)``): it resolves only the globals such files name,
each mapped to an object that builds nothing the file does not carry (an array's entries come from its
checked state). PyG's own reader unpickles them unrestricted, which would run any code a replaced file
names; no library offers a restricted reader of these files, hence this module."""
from __future__ import annotations

import collections
import importlib
import pickle
from typing import Any

import numpy as np
import scipy.sparse as sp

from pipegnn.data.planetoid_checks import check_array_state

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)

try:
    _multiarray = importlib.import_module("numpy._core.multiarray")
except ImportError:  # numpy < 2
    _multiarray = importlib.import_module("numpy.core.multiarray")
_reconstruct = _multiarray._reconstruct

class _CheckedArray(np.ndarray):
    """What a raw file's ``numpy.ndarray`` global unpickles to: an array whose state is checked
    ([`check_array_state`][pipegnn.data.planetoid_checks.check_array_state]) before numpy allocates it."""

    def __new__(cls, shape: Any = (0,), *args: Any, **kwargs: Any) -> "_CheckedArray":
        """Only an empty array: a raw file's array takes its entries from its pickled state (checked), never
        from a shape the file names in a call (``ndarray((60000000,), 'u1')`` in a 51-byte file).

        Raises:
            ValueError: a shape of any entries.
        """
        if int(np.prod(shape)) != 0:
            raise ValueError(f"a raw file builds an array of shape {shape!r} from nothing but its shape")
        return super().__new__(cls, shape, *args, **kwargs)

    def __setstate__(self, state: Any) -> None:
        check_array_state(state)
        super().__setstate__(state)


def _empty_reconstruct(subtype: Any, shape: Any, dtype: Any) -> Any:
    """numpy's ``_reconstruct``, of an empty array only (numpy's pickles reconstruct ``(0,)``, then set the
    state): given a shape of entries it built them from nothing, uninitialised, skipping the state's check
    (a 74-byte ``ind.cora.x`` loaded as 140 x 1433 features of heap memory; an object array of 5e8 entries
    took 4.2 GB).

    Raises:
        ValueError: a shape of any entries.
    """
    if int(np.prod(shape)) != 0:
        raise ValueError(f"a raw file reconstructs an array of shape {shape!r} without its entries")
    return _reconstruct(subtype, shape, dtype)


def _list_factory(*args: Any) -> list[Any]:
    """What a raw file's ``list`` global is: the adjacency dict's factory of empty lists (``graph`` is a
    ``defaultdict(list)``), which builds nothing from its arguments (``list`` of a crafted array expanded a
    51-byte file into 2.8 GB of numpy scalars).

    Raises:
        ValueError: called with an argument.
    """
    if args:
        raise ValueError("a raw file calls list on something; its lists are written out, not built")
    return []


#: The only globals a raw Planetoid pickle may name (module, name as written by Python 2's pickle),
#: mapped to the objects themselves: nothing is imported by a name read from a file.
_RAW_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "dtype"): np.dtype,
    ("numpy", "ndarray"): _CheckedArray,
    ("numpy.core.multiarray", "_reconstruct"): _empty_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _empty_reconstruct,
    ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
    ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
    ("scipy.sparse", "csr_matrix"): sp.csr_matrix,
    ("__builtin__", "list"): _list_factory,
    ("builtins", "list"): _list_factory,
    ("collections", "defaultdict"): collections.defaultdict,
}


class RawUnpickler(pickle._Unpickler):
    """An unpickler that resolves only `_RAW_GLOBALS` (anything else: UnpicklingError). Python's own,
    not the C one: its memo is a dict (the C unpickler grows its memo table to twice the largest index a
    file names and zeroes it: 9 bytes asked for 2.4 GB); the raw files are a few MB of large arrays."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _RAW_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed in a raw Planetoid "
                                         f"file") from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed in a raw Planetoid file")
