"""Array types shared by the package, and read-only array construction."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
IndexArray = npt.NDArray[np.intp]


def frozen_floats(values: object) -> FloatArray:
    """A read-only float64 copy of `values`: fitted parameters must not change under us."""
    array = np.array(values, dtype=np.float64)
    array.setflags(write=False)
    return array


def frozen_ints(values: object) -> IntArray:
    """A read-only int64 copy of `values`."""
    array = np.array(values, dtype=np.int64)
    array.setflags(write=False)
    return array
