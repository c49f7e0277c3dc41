"""Where numba keeps the compiled kernels of ``dpate_core`` (``@numba.njit(cache=True)``).

``$NUMBA_CACHE_DIR`` when it is set (a deployment sets it, ``deployments/systemd/*.env.example``),
else ``$XDG_CACHE_HOME/dpate/numba`` (by default ``~/.cache/dpate/numba``). Never inside the
installed package, numba's own default: the cache files it writes there are not pip's, so a later
``pip install`` of another build (the README's second command after its first) leaves them behind
as a stale ``site-packages/dpate_core`` folder that shadows the new install.

Imported first by :mod:`dpate_core` (every submodule import runs it), before any kernel compiles;
numba reads the variable again at each compilation, so a numba imported earlier follows it too.
Where the folder cannot be created, numba falls back to its own default.

:func:`njit` is the decorator of every kernel: ``numba.njit`` with the same options, applied at
the kernel's first call, so importing a module that defines kernels does not import numba (about
half a second): ``dpate check`` and ``dpate ledger show`` never call one.

:func:`interpreted` runs the kernels not compiled yet as the Python functions they are written
as, for callers whose inputs are a few counts (``dpate plan``'s predicted sensitivities): the same
code, without numba's import and its first-call set-up (about a second), which cost more than
the loop they would speed up.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["LazyKernel", "default_cache_dir", "interpreted", "njit"]

F = TypeVar("F", bound=Callable[..., Any])


def default_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/dpate/numba``, or ``~/.cache/dpate/numba``; None when the process has
    no home folder (numba then uses its own default)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "dpate" / "numba"


if "NUMBA_CACHE_DIR" not in os.environ and (_default := default_cache_dir()) is not None:
    os.environ["NUMBA_CACHE_DIR"] = str(_default)


_LOCK = threading.Lock()
_INTERPRETED: ContextVar[bool] = ContextVar("dpate_interpreted_kernels", default=False)


@contextmanager
def interpreted() -> Iterator[None]:
    """Within the block, a kernel whose dispatcher is not made yet runs as its Python function
    (and the kernels it calls, likewise): numba is neither imported nor set up. A kernel made
    before (numba loaded in this process) runs compiled. The same values as compiled (the
    matching sensitivities are compared to the bit in tests/cli/test_startup_imports.py); for
    small inputs only (a Python loop)."""
    token = _INTERPRETED.set(True)
    try:
        yield
    finally:
        _INTERPRETED.reset(token)


class LazyKernel:
    """A kernel whose ``numba.njit(**options)`` dispatcher is made at its first call.

    Making one dispatcher makes those of every lazy kernel in the same module's globals (the
    kernels it may call, its own module's or imported ones) and puts the dispatchers in place of
    the wrappers there, so numba, compiling the kernel, finds its callees compiled or compilable;
    and a module's own calls go to the dispatcher directly from then on. The Python function,
    its module and its name are numba's cache key, as under a plain ``@numba.njit(cache=True)``.
    """

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        self.py_func = func
        self.options = options
        self._dispatcher: Any = None
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__module__ = func.__module__
        self.__doc__ = func.__doc__

    def dispatcher(self) -> Any:
        """numba's dispatcher of this kernel (imports numba on the first call)."""
        if self._dispatcher is None:
            with _LOCK:
                self._make()
        return self._dispatcher

    def _make(self) -> None:
        if self._dispatcher is not None:
            return
        import numba

        self._dispatcher = numba.njit(**self.options)(self.py_func)
        scope = self.py_func.__globals__
        for name, value in list(scope.items()):
            if isinstance(value, LazyKernel):
                value._make()
                scope[name] = value._dispatcher

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._dispatcher is None and _INTERPRETED.get():
            return self.py_func(*args, **kwargs)
        return self.dispatcher()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<LazyKernel {self.__module__}.{self.__qualname__}>"


def njit(**options: Any) -> Callable[[F], F]:
    """``numba.njit(**options)``, applied at the decorated kernel's first call
    (:class:`LazyKernel`)."""

    def wrap(func: F) -> F:
        return LazyKernel(func, options)  # type: ignore[return-value]

    return wrap
