"""Where a remote store lives: its URL, the client that reads it (obstore or fsspec), and downloads with retries.

`Location` holds a store's URL and the ``storage_options`` given for it,
opens its client lazily (in the process that reads: a pickled `Location`
reopens it in a worker) and downloads one file with retries and
exponential backoff. The client is obstore (Rust: faster, and less CPU per
byte than s3fs; docs/store.md, "Filesystem layer") when it is
installed, the scheme is ``s3``/``s3a``/``gs``/``http(s)`` and every
option has an obstore equivalent (`obstore_config`); otherwise fsspec.
``FEEDLINE_FS_BACKEND=fsspec`` (or ``obstore``) forces one. Credentials: options the user passed explicitly
travel with the pickle (a worker needs them to fetch); credentials from the
environment or a credentials file never do (each worker's filesystem reads
them itself). Messages and reprs show the URL without its user info and
query string, and never an option's value.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import threading
import time

from .._optional import require
from ._errors import StoreError

__all__ = ["BACKEND_ENV", "Location", "choose_backend", "is_url", "obstore_config", "redact"]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# scheme -> (module, pip package) the filesystem needs beyond fsspec; the extra names them.
_BACKENDS = {
    "s3": ("s3fs", "s3fs", "remote"), "s3a": ("s3fs", "s3fs", "remote"),
    "gs": ("gcsfs", "gcsfs", "gcs"), "gcs": ("gcsfs", "gcsfs", "gcs"),
    "az": ("adlfs", "adlfs", "azure"), "abfs": ("adlfs", "adlfs", "azure"), "abfss": ("adlfs", "adlfs", "azure"),
    "http": ("aiohttp", "aiohttp", "remote"), "https": ("aiohttp", "aiohttp", "remote"),
}
BACKEND_ENV = "FEEDLINE_FS_BACKEND"  # "fsspec", "obstore" or "auto" (the default)
# Schemes whose URLs mean the same to obstore as to fsspec (obstore's az:// names the account too: adlfs stays).
_OBSTORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "http", "https")
# s3fs option -> obstore S3 config key, for the options that map one to one.
_S3_KEYS = {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token",
            "endpoint_url": "endpoint"}
_SECRET_WORDS = ("secret", "token", "password", "passwd", "key", "credential", "sas", "signature", "auth", "session")
RETRIES = 4  # attempts after the first: 0.2 + 0.4 + 0.8 + 1.6 s of backoff rides out a server's brief hiccup
_CHUNK = 0  # obstore hands over each piece as it arrives (its default buffers 10 MB first: a whole file in memory)
BACKOFF = 0.2  # seconds before the first retry; doubled after each (with up to 50 % jitter)


def obstore_config(protocol: str, options: dict) -> dict | None:
    """obstore's ``from_url`` keyword arguments for fsspec ``options``; None when one has no equivalent.

    S3: ``key``, ``secret``, ``token``, ``endpoint_url`` (``http://`` allows
    plain HTTP), ``anon`` and ``client_kwargs={"region_name": ...}``. Other
    schemes: no options (obstore reads credentials from the environment as
    the cloud SDKs do). Anything else keeps fsspec, which takes it as is.

    >>> obstore_config("s3", {"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9000"})["config"]["endpoint"]
    'http://127.0.0.1:9000'
    >>> obstore_config("s3", {"requester_pays": True}) is None
    True
    """
    if protocol not in _OBSTORE_SCHEMES:
        return None
    if protocol not in ("s3", "s3a"):
        if options:
            return None
        return {"client_options": {"allow_http": True}} if protocol == "http" else {}
    config, client = {}, {}
    for name, value in options.items():
        if name in _S3_KEYS and isinstance(value, str):
            config[_S3_KEYS[name]] = value
        elif name == "anon" and isinstance(value, bool):
            config["skip_signature"] = value
        elif name == "client_kwargs" and isinstance(value, dict) and set(value) <= {"region_name"}:
            if value.get("region_name"):
                config["region"] = value["region_name"]
        else:
            return None
    if config.get("endpoint", "").startswith("http://"):
        client["allow_http"] = True
    return {"config": config, "client_options": client}


def choose_backend(protocol: str, options: dict) -> str:
    """``"obstore"`` or ``"fsspec"`` for a URL's scheme and options (see the module docstring).

    Raises:
        ValueError: ``FEEDLINE_FS_BACKEND`` is not ``auto``, ``fsspec`` or ``obstore``, or forces
            obstore where it cannot take the scheme or options.
    """
    forced = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if forced not in ("auto", "fsspec", "obstore"):
        raise ValueError(f"{BACKEND_ENV}={forced!r}: use 'auto', 'fsspec' or 'obstore'")
    if forced == "fsspec":
        return "fsspec"
    fits = obstore_config(protocol, options) is not None
    if forced == "obstore":
        if not fits:
            raise ValueError(f"{BACKEND_ENV}=obstore, but obstore cannot read {protocol}:// with storage_options "
                             f"{sorted(options)}; unset {BACKEND_ENV} to use fsspec")
        require("obstore", "remote", f"{BACKEND_ENV}=obstore")
        return "obstore"
    return "obstore" if fits and importlib.util.find_spec("obstore") is not None else "fsspec"


def is_url(path) -> bool:
    """True for ``s3://...``, ``https://...`` and other remote URLs (``file://`` is local).

    >>> is_url("s3://bucket/train.store"), is_url("/data/train.store"), is_url("file:///data/x")
    (True, False, False)
    """
    if not isinstance(path, str):
        return False
    match = _SCHEME.match(path)
    return bool(match) and match.group(1).lower() != "file"


def redact(url: str) -> str:
    """``url`` without user info and query string (where credentials and signatures hide).

    >>> redact("https://me:pw@host/data/x.arrow?X-Amz-Signature=abc")
    'https://***@host/data/x.arrow'
    """
    url = re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1***@", url)
    return url.split("?", 1)[0].split("#", 1)[0]


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _first_line(error) -> str:
    """An obstore error's message without the debug dump that follows it."""
    return str(error).split("\n", 1)[0]


class Location:
    """A remote directory (the store) and how to reach it.

    Args:
        url: the store's URL, e.g. ``s3://bucket/prefix/train.store``.
        storage_options: passed to the fsspec filesystem as is (``key``,
            ``secret``, ``endpoint_url``, ``client_kwargs``, ``anon``...), or
            mapped to obstore's (`obstore_config`) when obstore reads.
        retries: attempts after the first for each download.
    """

    def __init__(self, url: str, storage_options: dict | None = None, retries: int = RETRIES):
        if not is_url(url):
            raise ValueError(f"expected a URL such as 's3://bucket/train.store', got {redact(str(url))!r}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise TypeError(f"storage_options must be a dict of fsspec options, got {type(storage_options).__name__}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
        self.url = url.rstrip("/")
        self.protocol = _SCHEME.match(url).group(1).lower()
        self.options = dict(storage_options or {})
        self.retries = retries
        self._fs = None
        self._store = None  # obstore's store, when `backend` is "obstore"
        self._lock = threading.Lock()
        self._secrets = self._secret_values()
        self.backend = choose_backend(self.protocol, self.options)

    def _secret_values(self) -> list[str]:
        found = []

        def walk(name, value):
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(str(k), v)
            elif isinstance(value, str) and len(value) >= 4 and _is_secret(name):
                found.append(value)

        walk("", self.options)
        userinfo = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://([^/@]*)@", self.url)
        if userinfo:
            found.append(userinfo.group(1))
        return sorted(found, key=len, reverse=True)

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        # Explicit options travel: a worker needs them to fetch. Environment credentials do not.
        return {"url": self.url, "options": self.options, "retries": self.retries}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["url"], state["options"], state["retries"])

    def __repr__(self) -> str:
        names = ", ".join(sorted(self.options))
        return f"Location({redact(self.url)!r}, storage_options: {names or 'none'}, {self.backend})"

    # ------------------------------------------------------------ filesystem
    @property
    def public_url(self) -> str:
        """The URL as messages show it."""
        return redact(self.url)

    def scrub(self, text: str) -> str:
        """``text`` with every credential this location knows replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"]*?)\?[^\s'\"]*", r"\1", text)

    def filesystem(self):
        """The fsspec filesystem, opened once per process (a missing backend names the extra)."""
        if self._fs is None:
            with self._lock:
                if self._fs is None:
                    fsspec = require("fsspec", "remote", f"reading a store at {self.public_url}")
                    module, package, extra = _BACKENDS.get(self.protocol, (None, None, "remote"))
                    if module is not None:
                        require(module, extra, f"reading a {self.protocol}:// store", package=package)
                    try:
                        self._fs = fsspec.filesystem(self.protocol, **self.options)
                    except (ValueError, TypeError, ImportError) as e:
                        # from None: the original message may quote an option's value
                        raise StoreError(f"cannot open a {self.protocol}:// filesystem for {self.public_url}: "
                                         f"{self.scrub(str(e))}; check storage_options") from None
        return self._fs

    def object_store(self):
        """obstore's store for this URL (its path is the store's prefix), opened once per process."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    stores = require("obstore.store", "remote", f"reading {self.public_url} with obstore", package="obstore")
                    try:
                        # Retries are `_attempt`'s (counted, and reported by file): obstore's own are off.
                        self._store = stores.from_url(self.url, **obstore_config(self.protocol, self.options),
                                                      retry_config={"max_retries": 0})
                    except Exception as e:  # obstore's configuration errors; from None: they may quote a value
                        raise StoreError(f"cannot open {self.public_url} with obstore: {self.scrub(str(e))}; check "
                                         f"storage_options, or set {BACKEND_ENV}=fsspec") from None
        return self._store

    def _obstore_get(self, name: str):
        """obstore's ``get`` of ``name``, its errors as the built-in ones `_attempt` knows (not found, refused)."""
        import obstore
        from obstore import exceptions

        try:
            return obstore.get(self.object_store(), name)
        except (exceptions.NotFoundError, FileNotFoundError) as e:
            raise FileNotFoundError(_first_line(e)) from None
        except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError, PermissionError) as e:
            raise PermissionError(_first_line(e)) from None
        except (exceptions.BaseError, OSError) as e:  # a network error or a 5xx: `_attempt` retries it
            raise OSError(_first_line(e)) from None

    def child(self, name: str) -> str:
        """The URL of ``name`` (``raw/part-00000.arrow``) inside the store."""
        return f"{self.url}/{name}"

    def read_bytes(self, name: str, on_retry=None) -> bytes:
        """The whole of a small file (the manifest), with retries."""
        if self.backend == "obstore":
            return self._attempt(name, lambda: bytes(self._obstore_get(name).bytes()), on_retry)
        return self._attempt(name, lambda: self.filesystem().cat_file(self.child(name)), on_retry)

    def download(self, name: str, dest: str, size: int, on_retry=None) -> None:
        """Copy ``name`` to the local file ``dest``, retried until it arrives with ``size`` bytes.

        Raises:
            StoreError: naming the file, after the last attempt (or at once
                for a file the server does not have).
        """
        def once():
            if self.backend == "obstore":
                with open(dest, "wb") as f:
                    for chunk in self._obstore_get(name).stream(min_chunk_size=_CHUNK):
                        f.write(memoryview(chunk))
            else:
                self.filesystem().get_file(self.child(name), dest)
            got = os.path.getsize(dest)
            if got != size:
                raise OSError(f"received {got} bytes where the manifest says {size} (a truncated transfer)")

        self._attempt(name, once, on_retry)

    def _attempt(self, name: str, action, on_retry=None):
        delay = BACKOFF
        for attempt in range(self.retries + 1):
            try:
                return action()
            except StoreError:
                raise
            except (FileNotFoundError, PermissionError) as e:
                what = "does not exist" if isinstance(e, FileNotFoundError) else "is not readable with these credentials"
                raise StoreError(f"{self.public_url}/{name} {what} ({type(e).__name__}: {self.scrub(str(e))}); "
                                 "check the URL and storage_options, or copy the store again") from None
            except Exception as e:  # network errors come as many types (aiohttp, botocore, OSError)
                if attempt == self.retries:
                    raise StoreError(
                        f"cannot download {self.public_url}/{name}: {self.retries + 1} attempts failed, the last with "
                        f"{type(e).__name__}: {self.scrub(str(e))}. Check the network and the server, or raise "
                        "retries= in from_store") from None
                if on_retry is not None:
                    on_retry(name, e)
                time.sleep(delay * (1 + 0.5 * random.random()))
                delay *= 2
        raise AssertionError("unreachable")
