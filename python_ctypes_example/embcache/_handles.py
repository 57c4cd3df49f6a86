"""Library handles shared by threads: _Owner keeps every call that uses a handle in flight,
so close() destroys it only once none is (ctypes releases the GIL during a call)."""

import ctypes
import functools
import os
import threading
import weakref

from ._capi import _fail


_LIVE = {"store": 0, "cache": 0, "group": 0}  # library handles this module holds (tests)
_LIVE_LOCK = threading.Lock()


def _live(what, n):
    with _LIVE_LOCK:
        _LIVE[what] += n


class _Owner:
    """A library handle (self._h) that threads share. ctypes releases the GIL during a call,
    so another thread's close() could free the handle under it: every call that uses the
    handle registers as in flight (_call), close() (_closing) refuses new calls, waits until
    none is in flight and only then destroys. A call on a closed object raises EmcError
    (EMC_EINVAL, "... is closed"). Two closes at once: the second waits for the first and
    finds the object closed. A close() from a thread with a call in flight on the object (a
    signal handler, a buffer protocol hook) raises EmcError instead of waiting for itself. A
    child of fork() starts with no call in flight. A lock round trip on entry and on exit.
    A new method that uses the handle must be an @_in_flight one or use _call."""

    _what = "object"

    def _init_owner(self):
        self._h = ctypes.c_void_p()
        # reentrant: the collector may run a finalizer (a Cache's close() dropping its user
        # count on this store) on a thread that holds the lock
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._closing = None  # the closing thread's id
        self._mine = {}       # thread id -> calls it has in flight here (empty: none at all)
        _OWNERS.add(self)

    def _after_fork(self):
        """In a child of fork(): the parent's other threads and their calls are gone."""
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._closing = None
        self._mine = {}

    def _enter(self, func):
        me, counted = threading.get_ident(), False
        try:
            with self._lock:
                h = None if self._closing is not None else self._h
                if h:
                    self._mine[me] = self._mine.get(me, 0) + 1
                    counted = True
        except BaseException:  # (KeyboardInterrupt on the way out of the lock)
            if counted:
                self._leave()
            raise
        if not h:
            _fail(func, f"the {self._what} is closed")
        return h

    def _leave(self):
        me = threading.get_ident()
        with self._lock:
            n = self._mine.get(me, 0) - 1
            if n > 0:
                self._mine[me] = n
            else:
                self._mine.pop(me, None)
            if self._closing is not None and not self._mine:
                self._idle.notify_all()

    def _call(self, func):
        """`with self._call(func) as h:` the handle, in flight for the block."""
        return _InFlight(self, func)

    def _closing_handle(self):
        """For close(): refuse new calls, wait for those in flight; the handle (None when
        already closed). The caller destroys it, then calls _closed(ok)."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the handle existed
            return None
        me = threading.get_ident()
        with lock:
            while self._closing is not None:
                if self._closing == me:  # a close nested in this thread's own close
                    return None
                self._idle.wait()  # another thread's close(): then closed, or reopened
            if not self._h:
                return None
            if self._mine.get(me):
                _fail("close", f"close() of the {self._what} from inside a call on it in this "
                      "thread (a signal handler or a buffer hook?): it would wait for itself")
            self._closing = me
            while self._mine:
                self._idle.wait()
            return self._h

    def _closed(self, destroyed):
        """After close()'s destroy: forget the handle if it was destroyed, else reopen."""
        with self._lock:
            if destroyed:
                self._h = ctypes.c_void_p()
            self._closing = None
            self._idle.notify_all()


_OWNERS = weakref.WeakSet()  # every _Owner, for fork()'s child


def _after_fork_in_child():
    for o in list(_OWNERS):
        o._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _in_flight(func):
    """Decorator: the method runs as a call in flight on self (an _Owner)."""
    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            self._enter(func)
            try:
                return method(self, *args, **kwargs)
            finally:
                self._leave()
        return call
    return wrap


class _InFlight:
    __slots__ = ("o", "h")

    def __init__(self, o, func):
        self.h = o._enter(func)
        self.o = o

    def __enter__(self):
        return self.h

    def __exit__(self, *exc):
        self.o._leave()
