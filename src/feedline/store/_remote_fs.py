"""Where a remote store lives: its URL, the fsspec filesystem that reads it, and downloads with retries.

`Location` holds a store's URL and the ``storage_options`` given for it,
opens the filesystem lazily (in the process that reads: a pickled
`Location` reopens it in a worker) and downloads one file with retries and
exponential backoff. Credentials: options the user passed explicitly
travel with the pickle (a worker needs them to fetch); credentials from the
environment or a credentials file never do (each worker's filesystem reads
them itself). Messages and reprs show the URL without its user info and
query string, and never an option's value.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time

from .._optional import require
from ._errors import StoreError

__all__ = ["Location", "is_url", "redact"]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# scheme -> (module, pip package) the filesystem needs beyond fsspec; the extra names them.
_BACKENDS = {
    "s3": ("s3fs", "s3fs", "remote"), "s3a": ("s3fs", "s3fs", "remote"),
    "gs": ("gcsfs", "gcsfs", "gcs"), "gcs": ("gcsfs", "gcsfs", "gcs"),
    "az": ("adlfs", "adlfs", "azure"), "abfs": ("adlfs", "adlfs", "azure"), "abfss": ("adlfs", "adlfs", "azure"),
    "http": ("aiohttp", "aiohttp", "remote"), "https": ("aiohttp", "aiohttp", "remote"),
}
_SECRET_WORDS = ("secret", "token", "password", "passwd", "key", "credential", "sas", "signature", "auth", "session")
RETRIES = 4  # attempts after the first: 0.2 + 0.4 + 0.8 + 1.6 s of backoff rides out a server's brief hiccup
BACKOFF = 0.2  # seconds before the first retry; doubled after each (with up to 50 % jitter)


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


class Location:
    """A remote directory (the store) and how to reach it.

    Args:
        url: the store's URL, e.g. ``s3://bucket/prefix/train.store``.
        storage_options: passed to the fsspec filesystem as is (``key``,
            ``secret``, ``endpoint_url``, ``client_kwargs``, ``anon``...).
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
        self._lock = threading.Lock()
        self._secrets = self._secret_values()

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
        return f"Location({redact(self.url)!r}, storage_options: {names or 'none'})"

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

    def child(self, name: str) -> str:
        """The URL of ``name`` (``raw/part-00000.arrow``) inside the store."""
        return f"{self.url}/{name}"

    def read_bytes(self, name: str, on_retry=None) -> bytes:
        """The whole of a small file (the manifest), with retries."""
        return self._attempt(name, lambda: self.filesystem().cat_file(self.child(name)), on_retry)

    def download(self, name: str, dest: str, size: int, on_retry=None) -> None:
        """Copy ``name`` to the local file ``dest``, retried until it arrives with ``size`` bytes.

        Raises:
            StoreError: naming the file, after the last attempt (or at once
                for a file the server does not have).
        """
        def once():
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
