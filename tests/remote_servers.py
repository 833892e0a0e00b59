"""Real servers on localhost for tests and benchmarks of remote data: S3 (moto) and plain HTTP.

Nothing here reaches outside the machine: both servers bind 127.0.0.1 on
a free port and run in threads of the calling process (process workers
reach them over TCP like any client).

S3 (``moto[server]``, the S3 HTTP API that boto3 and s3fs speak)::

    with S3Server(latency=0.02) as s3:              # 20 ms added to every request
        s3.upload("bucket", "data/train.store", local_dir)
        fl.from_store("s3://bucket/data/train.store", storage_options=s3.storage_options)

HTTP (a folder served as is; latency and failures injected per request)::

    with HttpServer(root, latency=0.1, faults=Faults(rate=0.01)) as web:
        fl.from_store(web.url("train.store"))
        web.requests, web.gets, web.injected        # all requests, full GETs per path, [(path, kind)] of faults
        web.events                                  # [("get", path) as a GET arrives, ("sent", path) when answered]

Fault kinds: ``"500"`` (a 500 response), ``"reset"`` (the connection is
reset before any response), ``"truncate"`` (headers announce the whole
file, half the body is sent, the connection closes), ``"stall"`` (half the
body, then a pause of ``Faults.stall`` seconds before the rest).
Pytest fixtures: `s3_server` (one per session, no added latency) and
`http_server` (a factory: ``http_server(root, latency=..., faults=...)``;
servers stop at the end of the test). Use them in a test module with
``s3_server, http_server = remote_servers.s3_server, remote_servers.http_server``.
"""

from __future__ import annotations

import collections
import os
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

__all__ = ["Faults", "HttpServer", "S3Server", "http_server", "s3_server"]

CREDENTIALS = {"key": "feedline-test-key", "secret": "feedline-test-secret-0123456789"}  # moto accepts any


@dataclass
class Faults:
    """Which requests fail: each GET with probability ``rate`` (seeded), with a kind drawn from ``kinds``.

    ``every`` (if set) fails exactly every ``every``-th GET instead, taking
    the kinds in turn, and
    ``only`` limits faults to paths containing that text.
    """

    rate: float = 0.0
    kinds: tuple = ("500", "reset", "truncate")
    seed: int = 0
    every: int | None = None
    only: str | None = None
    stall: float = 5.0
    _rng: random.Random = field(default=None, repr=False)
    _count: int = field(default=0, repr=False)

    def __post_init__(self):
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def pick(self, path: str) -> str | None:
        """The fault for this request, or None."""
        if self.only is not None and self.only not in path:
            return None
        with self._lock:
            self._count += 1
            if self.every is not None:  # every kind in turn
                hit = self._count % self.every == 0
                return self.kinds[(self._count // self.every - 1) % len(self.kinds)] if hit else None
            hit = self._rng.random() < self.rate
            return self._rng.choice(self.kinds) if hit else None


class _Handler(BaseHTTPRequestHandler):
    server_version = "feedline-test"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: tests read the counters instead
        pass

    def _target(self):
        path = unquote(self.path.split("?", 1)[0]).lstrip("/")
        full = os.path.realpath(os.path.join(self.server.root, path))
        if not full.startswith(self.server.root + os.sep) or not os.path.isfile(full):
            return None
        return full

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body: bool):
        owner = self.server.owner
        with owner.lock:
            owner.requests += 1
            if body:
                owner.events.append(("get", self.path))
        if owner.latency:
            time.sleep(owner.latency)
        full = self._target()
        if full is None:
            self.send_error(404)
            return
        if body:
            with owner.lock:
                owner.order.append(self.path)
        fault = owner.faults.pick(self.path) if (body and owner.faults is not None) else None
        if fault is not None:
            with owner.lock:
                owner.injected.append((self.path, fault))
        if fault == "500":
            self.send_error(500, "injected failure")
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            raise ConnectionResetError("injected reset")
        with open(full, "rb") as f:
            data = f.read()
        start, end = 0, len(data)
        ranged = self.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[6:].partition("-")
            start = int(first or 0)
            end = min(len(data), int(last) + 1) if last else len(data)
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Content-Type", "application/octet-stream")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        if not body:
            return
        chunk = data[start:end]
        if fault in ("truncate", "stall"):
            self.wfile.write(chunk[: len(chunk) // 2])
            self.wfile.flush()
            if fault == "truncate":
                self.close_connection = True
                return
            time.sleep(owner.faults.stall)
            self.wfile.write(chunk[len(chunk) // 2:])
            return
        self.wfile.write(chunk)
        self.wfile.flush()
        with owner.lock:
            owner.gets[self.path] += 1
            owner.events.append(("sent", self.path))


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # injected resets and clients that hang up
        pass


class _Server:
    """Start and stop a server thread; a context manager."""

    _server = None

    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class HttpServer(_Server):
    """A folder served over HTTP on 127.0.0.1, with per-request ``latency`` (s) and injected ``faults``."""

    def __init__(self, root: str, latency: float = 0.0, faults: Faults | None = None):
        self.root = os.path.realpath(root)
        self.latency, self.faults = latency, faults
        self.requests = 0
        self.gets = collections.Counter()  # path -> GETs answered in full
        self.order: list = []  # paths of GETs, in the order they arrived
        self.events: list = []  # ("get", path) as a GET arrives, ("sent", path) once its whole answer is written
        self.injected: list = []
        self.lock = threading.Lock()
        self._server = None

    def start(self) -> "HttpServer":
        self._server = _QuietServer(("127.0.0.1", 0), _Handler)
        self._server.root, self._server.owner = self.root, self
        threading.Thread(target=self._server.serve_forever, name="test-http-server", daemon=True).start()
        return self

    def url(self, path: str = "") -> str:
        """``http://127.0.0.1:PORT/path``: the URL of ``path`` under the served folder."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/{path.lstrip('/')}"


class _Latency:
    """WSGI middleware: sleep ``seconds`` before each request, and count requests."""

    def __init__(self, app, owner):
        self.app, self.owner = app, owner

    def __call__(self, environ, start_response):
        with self.owner.lock:
            self.owner.requests += 1
        if self.owner.latency:
            time.sleep(self.owner.latency)
        return self.app(environ, start_response)


class S3Server(_Server):
    """moto's S3 on 127.0.0.1 (a free port), with ``latency`` seconds added to every request.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``.
        storage_options: what s3fs (``fl.from_store(..., storage_options=)``) needs to reach it.
        requests: requests served so far.
    """

    def __init__(self, latency: float = 0.0):
        self.latency = latency
        self.requests = 0
        self.lock = threading.Lock()
        self._server = None

    def start(self) -> "S3Server":
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args):  # one line per request otherwise
                pass

        app = _Latency(DomainDispatcherApplication(create_backend_app), self)
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)
        threading.Thread(target=self._server.serve_forever, name="test-s3-server", daemon=True).start()
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        self.storage_options = {**CREDENTIALS, "endpoint_url": self.endpoint,
                                "client_kwargs": {"region_name": "us-east-1"}}
        return self

    def client(self):
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=CREDENTIALS["key"], aws_secret_access_key=CREDENTIALS["secret"])

    def upload(self, bucket: str, prefix: str, folder: str) -> str:
        """Put every file under ``folder`` at ``s3://bucket/prefix/...``; return that URL."""
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for here, _, names in os.walk(folder):
            for name in names:
                full = os.path.join(here, name)
                key = "/".join([prefix.strip("/"), *os.path.relpath(full, folder).split(os.sep)])
                client.upload_file(full, bucket, key)
        return f"s3://{bucket}/{prefix.strip('/')}"


@pytest.fixture(scope="session")
def s3_server():
    """One moto S3 server for the test session (no added latency)."""
    pytest.importorskip("moto.moto_server.werkzeug_app", reason="needs moto[server] (pip install -e '.[test]')")
    with S3Server() as server:
        yield server


@pytest.fixture
def http_server():
    """A factory: ``http_server(root, latency=0.0, faults=None)`` -> a started `HttpServer`, stopped after the test."""
    started = []

    def make(root, latency: float = 0.0, faults: Faults | None = None) -> HttpServer:
        server = HttpServer(root, latency, faults).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
