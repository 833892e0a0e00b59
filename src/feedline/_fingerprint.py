"""Content fingerprints of pipelines, so a cache is reused only for the same work.

`Pipeline.cache` keys a store by a digest of everything before it: the
source's data (paths, array contents) and each step's function. A function is
identified by what it does, not by its identity: its bytecode and constants,
its defaults, the values captured in its closure, and the helper functions
and constants of its own module that it refers to (so editing a helper that
``decode`` calls also changes the fingerprint). Library functions
(``np.flip``, ``cv2.imdecode``) are named by module and qualified name only:
a library upgrade does not invalidate caches.

The digest is stable across interpreter runs (no ``id()``, no default
``repr`` with addresses) and cheap: large arrays are sampled, not hashed
whole. Objects it cannot look into contribute their type's name only; that
is a deliberate under-approximation, documented in ``Pipeline.cache``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pickle
import sys
import types

import numpy as np

__all__ = ["code_digest", "digest"]

_MAX_DEPTH = 8
_FULL_HASH_BYTES = 64 << 20  # arrays up to 64 MiB are hashed whole; larger ones are sampled
_SAMPLED_ROWS = 1024
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def digest(obj) -> str:
    """A hex digest of what ``obj`` is and does (see the module docstring).

    >>> import numpy as np
    >>> digest({"size": 224, "mean": np.zeros(3)}) == digest({"size": 224, "mean": np.zeros(3)})
    True
    >>> digest({"size": 224, "mean": np.zeros(3)}) == digest({"size": 256, "mean": np.zeros(3)})
    False
    """
    hasher = hashlib.sha256()
    _Walker(hasher).visit(obj, 0)
    return hasher.hexdigest()[:32]


def code_digest(fn: types.FunctionType) -> str:
    """A digest of ``fn``'s code alone (bytecode, names, constants): not its closure, globals or line numbers.

    >>> code_digest(lambda x: x + 1) == code_digest(lambda x: x + 1) != code_digest(lambda x: x * 2)
    True
    """
    hasher = hashlib.sha256()
    _Walker(hasher)._code(fn.__code__)
    return hasher.hexdigest()[:16]


class _Walker:
    def __init__(self, hasher):
        self.hasher = hasher
        self.seen: set[int] = set()

    def put(self, *parts) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else str(part).encode("utf-8", "surrogatepass")
            self.hasher.update(len(data).to_bytes(8, "little"))
            self.hasher.update(data)

    def visit(self, obj, depth: int) -> None:
        """Feed ``obj`` into the digest: plain values by repr, containers item by item, code by what it does."""
        if isinstance(obj, _PLAIN):
            self.put(type(obj).__name__, repr(obj))
            return
        if depth > _MAX_DEPTH:
            self.put("deep", _qualified(type(obj)))
            return
        if id(obj) in self.seen:
            self.put("seen", _qualified(type(obj)))
            return
        self.seen.add(id(obj))
        for kinds, handler in self._VISITORS:
            if isinstance(obj, kinds):
                handler(self, obj, depth)
                return
        if hasattr(obj, "__qualname__") and _is_library(obj):
            self._visit_named(obj, depth)
        elif isinstance(obj, os.PathLike):
            self.put("path", os.fspath(obj))
        else:
            self._instance(obj, depth)

    def _visit_array(self, obj: np.ndarray, depth: int) -> None:
        self._array(obj)

    def _visit_numpy_scalar(self, obj: np.generic, depth: int) -> None:
        self.put("npscalar", obj.dtype.str, obj.tobytes())

    def _visit_sequence(self, obj, depth: int) -> None:
        self.put(type(obj).__name__, len(obj))
        for item in obj:
            self.visit(item, depth + 1)

    def _visit_dict(self, obj: dict, depth: int) -> None:
        self.put("dict", len(obj))
        for key in sorted(obj, key=repr):
            self.visit(key, depth + 1)
            self.visit(obj[key], depth + 1)

    def _visit_set(self, obj, depth: int) -> None:
        self.put("set", sorted(digest(item) for item in obj))

    def _visit_method(self, obj: types.MethodType, depth: int) -> None:
        self.put("method")
        self.visit(obj.__func__, depth + 1)
        self.visit(obj.__self__, depth + 1)

    def _visit_partial(self, obj: functools.partial, depth: int) -> None:
        self.put("partial")
        self.visit(obj.func, depth + 1)
        self.visit(obj.args, depth + 1)
        self.visit(obj.keywords, depth + 1)

    def _visit_named(self, obj, depth: int) -> None:
        """Builtins, modules, classes and library objects: by name (a class of the user's code also by its members)."""
        self.put("named", _qualified(obj))
        if isinstance(obj, type) and not _is_library(obj):
            self._class(obj, depth)

    def _array(self, a: np.ndarray) -> None:
        self.put("ndarray", a.dtype.str, a.shape)
        if a.nbytes <= _FULL_HASH_BYTES:
            self.put(np.ascontiguousarray(a).tobytes())
        else:  # sample evenly spaced rows: a fingerprint, not a checksum
            rows = np.linspace(0, len(a) - 1, _SAMPLED_ROWS).astype(np.intp)
            self.put(np.ascontiguousarray(a[rows]).tobytes())

    def _function(self, fn: types.FunctionType, depth: int) -> None:
        if _is_library(fn):
            self.put("named", _qualified(fn))
            return
        self.put("function", fn.__qualname__)
        self._code(fn.__code__)
        self.visit(fn.__defaults__, depth + 1)
        self.visit(fn.__kwdefaults__, depth + 1)
        for cell in fn.__closure__ or ():
            try:
                self.visit(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell (a name assigned after the closure was made)
                self.put("empty-cell")
        for name in sorted(_global_names(fn.__code__)):
            if name in fn.__globals__:
                self.put("global", name)
                self.visit(fn.__globals__[name], depth + 1)

    def _code(self, code: types.CodeType) -> None:
        self.put("code", code.co_code, code.co_names, code.co_varnames, code.co_argcount, code.co_kwonlyargcount)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const)
            else:
                self.put(repr(const) if isinstance(const, _PLAIN + (tuple, frozenset)) else type(const).__name__)

    def _class(self, cls: type, depth: int) -> None:
        for name, member in sorted(vars(cls).items()):
            if isinstance(member, (types.FunctionType, staticmethod, classmethod, property, *_PLAIN)):
                self.put("member", name)
                self.visit(getattr(member, "__func__", getattr(member, "fget", member)), depth + 1)

    def _instance(self, obj, depth: int) -> None:
        cls = type(obj)
        self.put("instance", _qualified(cls))
        if _module_top(cls) == "feedline":  # our own records (sources, ops): walk their data
            state = _state(obj)
        elif _is_library(cls):
            state = _library_state(obj)
        else:
            self._class(cls, depth)
            state = _state(obj)
        if state is not None:
            self.visit(state, depth + 1)

    # What `visit` does with a new object, by type: the first match wins (subclasses included).
    _VISITORS = (
        (np.ndarray, _visit_array),
        (np.generic, _visit_numpy_scalar),
        ((list, tuple), _visit_sequence),
        (dict, _visit_dict),
        ((set, frozenset), _visit_set),
        (types.FunctionType, _function),
        (types.MethodType, _visit_method),
        (functools.partial, _visit_partial),
        ((types.BuiltinFunctionType, types.ModuleType, type), _visit_named),
    )


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _state(obj):
    getstate = getattr(obj, "__getstate__", None)
    if getstate is not None:
        try:
            return getstate()
        except (TypeError, ValueError, AttributeError, NotImplementedError, RuntimeError, pickle.PickleError):
            # some objects refuse to give their state; their attributes are the next best thing
            return getattr(obj, "__dict__", None)
    return getattr(obj, "__dict__", None)


def _library_state(obj):
    """What distinguishes two configured library objects (an albumentations pipeline, a LogMel).

    Their attributes, when they are plain data; library internals are not
    walked further than that.
    """
    attributes = getattr(obj, "__dict__", None)
    if not attributes:
        return repr(obj) if type(obj).__repr__ is not object.__repr__ else None
    return {k: v for k, v in attributes.items() if isinstance(v, _PLAIN + (tuple, list, dict, np.ndarray, np.generic))}


def _qualified(obj) -> str:
    module = getattr(obj, "__module__", None) or type(obj).__module__
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{name}"


def _module_top(obj) -> str:
    module_name = getattr(obj, "__module__", None)
    return module_name.partition(".")[0] if isinstance(module_name, str) else ""


def _is_library(obj) -> bool:
    """True for objects defined in installed packages (site-packages, the standard library).

    Feedline's own ops (``feedline.vision``) count as library code too: they
    are versioned with the package.
    """
    module_name = getattr(obj, "__module__", None)
    if not isinstance(module_name, str):
        return False
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("builtins", "numpy", "feedline"):
        return True
    module = sys.modules.get(module_name)
    if module is None:  # code from a module we cannot see (exec'd, unpickled): walk it
        return False
    path = getattr(module, "__file__", None)
    if not path:  # C modules built into the interpreter are library; a notebook's __main__ is not
        return top in sys.builtin_module_names
    return "site-packages" in path or "dist-packages" in path or _in_stdlib(path)


@functools.cache
def _stdlib_prefix() -> str:
    return os.path.dirname(inspect.getfile(os))


def _in_stdlib(path: str) -> bool:
    return path.startswith(_stdlib_prefix())
