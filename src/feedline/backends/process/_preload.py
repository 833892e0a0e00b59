"""Libraries imported once for every worker: the fork server's zygotes.

A worker unpickles the pipeline, and that imports the libraries its
functions use: for torch, albumentations or jax, seconds of a core and a
hundred MB or more of private memory in every worker, so many workers start
slowly and a big host holds a copy per worker. Here the libraries are
imported once, in a *zygote*: a child
of the fork server that imports them and then forks the pipeline's workers,
which start with them loaded (shared, copy-on-write) in milliseconds.

Which libraries (consumer side, `libraries_to_preload`): the modules the
pickled pipeline names (a class or function by reference, a module a
function uses) that the consumer has imported from an installed package
(``site-packages``): never the user's own modules, whose import may open
files or connections that forked workers must not share, never the standard
library or what the server has already. Linux only (the thread check below
reads ``/proc``); ``FEEDLINE_PRELOAD=0`` turns it off.

Protocol (server side, `serve_zygote`): the server forks one zygote per set
of libraries, on the first fork request that names them, and forwards each
such request (``("fork", boot)``, length-prefixed pickles) on a pipe; the
zygote answers ``("forked", pid)``, or ``("declined", package)`` when it
must not fork, and the server then forks the worker itself (it imports the
libraries on its own, as without a zygote). Forking is safe only from a
single-threaded process: a zygote in which an import started a thread
declines every request, and the server leaves that package out of the
zygotes it starts later. Packages measured to start one when imported
(`STARTS_THREADS`) are never sent to a zygote: TensorFlow's import alone
took 4.4 s here, paid again by every worker after a decline. A zygote's
key is its libraries and the directory, ``sys.path`` and environment they
are imported in (the first request's): a library that reads a variable
when imported (``KERAS_BACKEND``) gets a zygote per value.
The zygote reaps its workers and reports ``("exited", pid, code)`` on the
server's reply pipe, as the server does for its own (small writes to a pipe
are atomic, so the two never interleave). It exits when the server does;
its workers see their parent gone and exit too, as a server's do. A
zygote whose libraries get a zygote in another setting is retired: its
request pipe closes, and it exits once its last worker has.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import sys

import cloudpickle
import numpy as np

from ...sources._base import Source
from . import _pipe_messages

__all__ = ["libraries_of", "libraries_to_preload", "preload_allowed", "serve_zygote"]

SERVER_HAS = ("numpy", "cloudpickle", "feedline")  # imported by the fork server itself
# Importing these started a thread (Python 3.11, Linux; `python -m benchmarks.preload` lists why it matters):
# a zygote would import them, decline, and every worker import them again.
STARTS_THREADS = ("pandas", "pyarrow", "sklearn", "tensorflow")


def preload_allowed() -> bool:
    """Whether workers may fork from zygotes: Linux (threads are counted in /proc), unless ``FEEDLINE_PRELOAD=0``."""
    return sys.platform.startswith("linux") and os.environ.get("FEEDLINE_PRELOAD", "1") != "0"


def libraries_to_preload(data: bytes) -> tuple[str, ...]:
    """The installed libraries' modules that unpickling ``data`` (a pickled pipeline) imports, sorted.

    Read by a dry run of the unpickling (`_ModulesNamed`): the modules of the
    classes and functions it names, and those a function by value uses
    (cloudpickle's ``subimport``); nothing is imported or built. Only
    modules this process has imported count (their files say where they
    come from); a string that is only a name (``"torch" in sys.modules``)
    does not.
    """
    names = _ModulesNamed(data).names()
    return tuple(sorted(name for name in names if _installed_library(name)))


def libraries_of(*objects) -> tuple[str, ...]:
    """`libraries_to_preload` of ``objects`` pickled as a pipeline is, with the data of their NumPy arrays left out.

    For a map described ahead of its run (`feedline.backends.warm_up`): its
    source and steps name the same libraries as the pipeline the executor
    pickles later, and a source's columns or a closure's tables, which name
    none, cost nothing here.
    """
    buffer = io.BytesIO()
    _WithoutArrays(buffer).dump(objects)
    return libraries_to_preload(buffer.getvalue())


class _WithoutArrays(cloudpickle.CloudPickler):
    """Pickles every NumPy array as None: only the modules a pickle names matter to `libraries_to_preload`.

    So is a source that pickling would prepare (`Source.prepared_when_pickled`:
    a ``.cache()`` wrote its whole store here, in this look-ahead thread,
    beside the run's own first pass: every sample decoded twice).
    """

    def reducer_override(self, obj):
        if isinstance(obj, np.ndarray) or isinstance(obj, Source) and obj.prepared_when_pickled:
            return type(None), ()
        return super().reducer_override(obj)


class _AnythingType(type):
    """`_Anything`'s metaclass: calling the class, or storing an item in it, gives the class again."""

    def __call__(cls, *args, **kwargs):
        return cls

    def __setitem__(cls, key, value):
        pass


class _Anything(metaclass=_AnythingType):
    """What the dry run builds in place of every object: this one class, which takes any arguments, state and items.

    A class (not an instance), because the pickle may build an instance of
    what it built before (``NEWOBJ``: an instance of a class that cloudpickle
    sends by value, a user's ``Dataset`` defined in the script), which the
    unpickler allows only from a type; the dry run must read on past it, or
    every module named after the first such instance is missed.
    """

    def __new__(cls, *args, **kwargs):
        return cls

    __setstate__ = staticmethod(lambda *state: None)
    append = staticmethod(lambda *values: None)
    extend = staticmethod(lambda *values: None)
    add = staticmethod(lambda *values: None)  # a set's items


class _ModulesNamed(pickle.Unpickler):
    """Unpickles with every global replaced by `_Anything`, noting the modules named on the way."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.modules: set[str] = set()

    def find_class(self, module, name):
        self.modules.add(module)
        if module == "cloudpickle.cloudpickle" and name == "subimport":
            return self._subimport
        return _Anything

    def persistent_load(self, pid):
        return _Anything

    def _subimport(self, name, *args):
        if isinstance(name, str):
            self.modules.add(name)
        return _Anything

    def names(self) -> set[str]:
        try:
            self.load()
        except Exception:  # noqa: S110 - a dry run: what was noted before the pickle needed real objects is kept
            pass
        return self.modules


def _installed_library(name: str) -> bool:
    module = sys.modules.get(name)
    top = name.partition(".")[0]
    if module is None or top in sys.stdlib_module_names or top in SERVER_HAS or top in STARTS_THREADS:
        return False
    path = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", ())), None)
    return isinstance(path, str) and any(part in ("site-packages", "dist-packages") for part in path.split(os.sep))


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def serve_zygote(modules: tuple[str, ...], boot: dict, requests: int, answers: int, reply_fd: int, child) -> None:
    """A zygote's life (in a child of the fork server): import ``modules``, then fork workers on request.

    ``child(boot, fds)`` becomes a worker (the server's `_child`), closing
    ``fds``. Never returns.
    """
    os.chdir(boot["cwd"])  # the libraries import as in a worker: the consumer's directory, environment and path
    os.environ.clear()
    os.environ.update(boot["env"])
    sys.path[:] = boot["sys_path"]
    declined = None  # the package whose import started a thread: forking from this process is unsafe
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112 - the worker's own unpickling reports what is wrong with it
            continue
        if _threads() > 1:
            declined = name.partition(".")[0]
            break
    requests_loop = _pipe_messages.Requests(requests, reply_fd, linger=True)
    for _, worker_boot in requests_loop:
        if declined:
            _pipe_messages.answer(answers, ("declined", declined))
            continue
        worker_boot = dict(worker_boot, parent_pid=os.getpid())
        pid = os.fork()
        if pid == 0:
            child(worker_boot, (requests, answers, reply_fd, *requests_loop.fds))
        _pipe_messages.answer(answers, ("forked", pid))
