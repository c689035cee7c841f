"""An HTTP reverse proxy in front of a real S3 server that counts the bytes
each object's GET answers carried: what a job read from the store, measured
on the wire, whatever process read it.

    with CountingProxy("http://127.0.0.1:8333") as proxy:
        proxy.endpoint                  # point AWS_ENDPOINT_URL here
        proxy.bytes_for("/bucket/key")  # bytes of GET answers for that object

Requests go through unchanged (the Host header too, so S3 signatures still
verify); answers are read whole and passed on.
"""

from __future__ import annotations

import http.client
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class CountingProxy:
    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        self.upstream = (target.hostname, target.port)
        self.got: Counter[str] = Counter()  # object path -> bytes of GET answers
        self.requests: Counter[str] = Counter()  # object path -> GET requests
        self.ranges: dict[str, list[tuple[str, int]]] = {}  # object path -> (Range header, bytes) of each GET
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    upstream.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                    answer = upstream.getresponse()
                    data = answer.read()
                    headers = answer.getheaders()
                finally:
                    upstream.close()
                self.send_response_only(answer.status, answer.reason)
                for name, value in headers:
                    if name.lower() not in _HOP_HEADERS:
                        self.send_header(name, value)
                if self.command == "HEAD":
                    self.send_header("Content-Length", answer.getheader("Content-Length") or "0")
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                if self.command == "GET" and not urlsplit(self.path).query:
                    with proxy._lock:
                        proxy.got[urlsplit(self.path).path] += len(data)
                        proxy.requests[urlsplit(self.path).path] += 1
                        proxy.ranges.setdefault(urlsplit(self.path).path, []).append(
                            (self.headers.get("Range", ""), len(data)))

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def bytes_for(self, path: str) -> int:
        with self._lock:
            return self.got[path]

    def reset(self) -> None:
        with self._lock:
            self.got.clear()
            self.requests.clear()
            self.ranges.clear()

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
