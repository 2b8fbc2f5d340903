"""Read the CIFAR python batches without running code from them.

A CIFAR batch is a pickle, and ``pickle.load`` calls whatever a file names: a data-root
that someone else can write would let a crafted file run code on every node that loads
it. This unpickler resolves only the names a real batch holds (numpy's array and dtype
rebuilders; ``_codecs.encode`` for latin-1 text, which Python 3 writes for bytes under
pickle protocol 2); dicts, lists, str, bytes and numbers need no name. Anything else is
refused, naming the file, before it is called.
"""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fedapp.data.errors import BadFile, describe

# numpy's rebuilders, taken from numpy's own reducers so their module path (numpy.core in
# files written by numpy 1, numpy._core by numpy 2) does not matter
_NUMPY = {
    "_reconstruct": np.ndarray((0,), np.uint8).__reduce__()[0],
    "scalar": np.int64(0).__reduce__()[0],
    "_frombuffer": np.zeros(1).__reduce_ex__(5)[0],
}
_NUMPY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray", "numpy.core.numeric", "numpy._core.numeric")


def _latin1(text: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` limited to the codec pickle itself writes (latin-1, for bytes)."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed in a CIFAR batch")
    return codecs.encode(text, encoding, errors)


class CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if module in _NUMPY_MODULES and name in _NUMPY:
            return _NUMPY[name]
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR batch (only dicts, lists, text, numbers and numpy arrays)")


def load(base: Path, rel: str) -> Any:
    """The object pickled in ``base / rel``; a BadFile naming ``rel`` if it is not a plain-data pickle."""
    try:
        with (base / rel).open("rb") as fh:
            return CifarUnpickler(fh, encoding="latin1").load()
    except Exception as err:
        raise BadFile(rel, f"not a readable CIFAR pickle: {describe(err)}") from err
