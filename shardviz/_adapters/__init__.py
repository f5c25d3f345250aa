"""Every use of a private Keras or JAX API, each with its reason.

shardviz reads Keras and JAX through their public APIs everywhere else. Where
no public API answers a question, the private access lives here, in one
function that says why it is needed and which public API would replace it,
so that a change in Keras or JAX breaks one file. A test fails on any
``keras.src``, ``jax._src`` or private-attribute access outside this package.
"""

import contextlib
import threading


class Swap:
    """Replace ``owner.name`` by ``make(original)`` while at least one caller
    holds the swap, and put the original back when the last one leaves.

    A replacement must behave exactly as the original for every caller that
    is not shardviz's own (in another thread, say), because while one thread
    holds the swap every thread sees it. Whenever no analysis runs, Keras
    and JAX are exactly as they were.

    >>> import types
    >>> box = types.SimpleNamespace(f=lambda: "original")
    >>> swap = Swap(lambda: box, "f", lambda original: lambda: "swapped")
    >>> with swap.held():
    ...     box.f()
    'swapped'
    >>> box.f()
    'original'
    """

    def __init__(self, owner, name: str, make):
        self._owner, self._name, self._make = owner, name, make
        self._lock = threading.Lock()
        self._count = 0
        self._original = None

    @contextlib.contextmanager
    def held(self):
        with self._lock:
            if self._count == 0:
                owner = self._owner()
                self._original = getattr(owner, self._name)
                setattr(owner, self._name, self._make(self._original))
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1
                if self._count == 0:
                    setattr(self._owner(), self._name, self._original)
                    self._original = None
