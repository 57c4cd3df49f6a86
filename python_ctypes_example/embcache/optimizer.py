"""Optimizer: the emc_optimizer a training call takes, its fields checked here."""

import ctypes
import math

import numpy as np

from ._capi import _MERGES, _OPT_KINDS, _Optimizer, _fail, _fn


class Optimizer:
    """emc_optimizer: the step Cache.apply_gradients takes.

    kind    "sgd" (w = fma(-lr, g, w) per element) or "rowwise_adagrad" (one accumulator per
            row: every table with ids in the batch needs state="adagrad")
    merge   "sum" or "mean": how the gradients of a batch's duplicate ids combine (summed in
            position order; "mean" then divides by the number of positions)
    lr      learning rate; eps, initial_accumulator: Adagrad's (>= 0). Finite numbers, taken
            as float32 (a value that overflows float32 is refused).
    The fields are checked here (EmcError, EMC_EINVAL), when the Optimizer is made and again
    at every call (they may be reassigned in between); an unknown keyword raises EmcError too.
    The C struct is made by emc_optimizer_init, so its struct_size is the library's."""

    FIELDS = ("kind", "merge", "lr", "eps", "initial_accumulator")

    def __init__(self, kind="sgd", merge="sum", lr=0.01, eps=1e-8, initial_accumulator=0.0,
                 **unknown):
        if unknown:
            _fail("Optimizer", f"unknown field {', '.join(map(repr, unknown))}; the fields are "
                               f"{', '.join(self.FIELDS)}")
        self.kind, self.merge, self.lr = kind, merge, lr
        self.eps, self.initial_accumulator = eps, initial_accumulator
        self._as_c("Optimizer")

    def _as_c(self, func):
        """The emc_optimizer of these fields, checked."""
        o = _Optimizer()
        _fn("emc_optimizer_init")(ctypes.byref(o))
        if o.struct_size != ctypes.sizeof(_Optimizer):
            _fail(func, f"emc_optimizer is {o.struct_size} bytes in the library, "
                        f"{ctypes.sizeof(_Optimizer)} in this module")
        for name, table in (("kind", _OPT_KINDS), ("merge", _MERGES)):
            v = getattr(self, name)
            if not isinstance(v, str) or v not in table:
                _fail(func, f"optimizer {name} {v!r}: use one of {list(table)}")
            setattr(o, name, table[v])
        for name in ("lr", "eps", "initial_accumulator"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                _fail(func, f"optimizer {name} = {v!r}: need a real number")
            try:
                f = ctypes.c_float(float(v)).value  # what the library will see
            except OverflowError:  # an int beyond any float
                f = math.inf
            if not math.isfinite(f):
                _fail(func, f"optimizer {name} = {v}: must be finite as a float32")
            if name != "lr" and f < 0:
                _fail(func, f"optimizer {name} = {v}: must be >= 0")
            setattr(o, name, f)
        return o

    def __repr__(self):
        return "Optimizer(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __eq__(self, other):
        return isinstance(other, Optimizer) and all(
            getattr(self, k) == getattr(other, k) for k in self.FIELDS)
