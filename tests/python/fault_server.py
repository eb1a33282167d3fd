#!/usr/bin/python3
"""A misbehaving local hub for qrepack's remote-source tests (standard library only).

FaultServer(ROOT, fault=...) serves a hub built by hub_fixture.build_hub() from 127.0.0.1:0:

  /api/models/ORG/REPO/revision/REV, /api/models/ORG/REPO/tree/REV     kind "api"
  /ORG/REPO/resolve/REV/FILE, non-LFS FILE: the bytes + ETag            kind "file"
  /ORG/REPO/resolve/REV/FILE, LFS FILE: 302 + X-Linked-Etag/-Size       kind "redirect"
  /cdn/lfs/SHA256/FILE: the LFS bytes (Range supported)                 kind "lfs"

LFS files redirect to /cdn/... on the same origin, except under redirect_other_origin, where
they go to a second listener on another port (origin "other") that serves only /cdn/.

A fault applies to requests whose kind is in `scope` (default: the kinds it makes sense for,
see DEFAULT_SCOPE), at most `times` times per file (None: always):

  none                  behave
  reset_mid_body        send half the body, then reset the connection (RST)
  status_429_then_ok    429 Too Many Requests with Retry-After: 0
  status_500_always     500 Internal Server Error (set times to make it transient)
  stall_body            send half the body, then send nothing until stall_seconds (<= 60) pass,
                        the client closes or the server stops; then close
  short_body            Content-Length of the whole range, half of it sent, then close
  lying_content_range   206 whose Content-Range (and bytes) are not the range asked for
  corrupt_body          tensor-data bytes flipped (every 4096th from the first in range); the
                        published hashes stay
  redirect_loop         an LFS resolve redirects to itself
  redirect_other_origin an LFS resolve redirects to the other origin, which records headers
  gzip_body             the body gzip-compressed, with Content-Encoding: gzip
  huge_header           a header that never ends: header lines until 10 GB are sent, the client
                        goes away, 60 s pass or the server stops
  slow                  the body paced at `rate` bytes per second

Every request is recorded (origin, method, path, headers, kind, status, fault) for assertions.
start()/stop() (or `with`) bound everything: handlers watch a stop event, sockets time out
after 30 s, and stop() shuts open connections and waits at most 5 s for handlers.

CLI: fault_server.py ROOT FAULT [--times N] [--seconds 120] serves until --seconds pass.
"""
import argparse
import gzip
import http.server
import json
import os
import select
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_fixture  # noqa: E402

CHUNK = 64 * 1024
HANDLER_TIMEOUT = 30          # seconds a socket read or write may block
STOP_WAIT = 5                 # seconds stop() waits for running handlers
MAX_STALL = 60
HUGE_HEADER_BYTES = 10 * 1000 ** 3
HUGE_HEADER_SECONDS = 60

BODY_FAULTS = {"reset_mid_body", "stall_body", "short_body", "lying_content_range",
               "corrupt_body", "gzip_body", "huge_header", "slow"}
STATUS_FAULTS = {"status_429_then_ok": 429, "status_500_always": 500}
REDIRECT_FAULTS = {"redirect_loop", "redirect_other_origin"}
FAULTS = ("none",) + tuple(sorted(BODY_FAULTS | set(STATUS_FAULTS) | REDIRECT_FAULTS))
DEFAULT_SCOPE = dict({f: {"lfs"} for f in BODY_FAULTS | set(STATUS_FAULTS)},
                     redirect_loop={"redirect"}, redirect_other_origin={"redirect"}, none=set())
KINDS = ("api", "file", "redirect", "lfs")


class FaultServer:
    """The hub of hub_fixture ROOT served with one selectable fault; thread-safe."""

    def __init__(self, root_dir, fault="none", times=None, scope=None, rate=64 * 1024,
                 stall_seconds=MAX_STALL, huge_header_seconds=HUGE_HEADER_SECONDS):
        self.layout = hub_fixture.load_hub(root_dir)
        self.rate = max(1, int(rate))
        self.stall_seconds = min(float(stall_seconds), MAX_STALL)
        self.huge_header_seconds = min(float(huge_header_seconds), HUGE_HEADER_SECONDS)
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._records = []
        self._servers = {}
        self._threads = []
        self._conns = set()
        self.set_fault(fault, times, scope)

    # -- configuration
    def set_fault(self, fault, times=None, scope=None):
        """Select FAULT (resets the per-file counts); see the module docstring."""
        if fault not in FAULTS:
            raise ValueError("unknown fault %r (known: %s)" % (fault, ", ".join(FAULTS)))
        bad = set(scope or ()) - set(KINDS)
        if bad:
            raise ValueError("unknown request kinds %s" % sorted(bad))
        with self._lock:
            self.fault, self.times = fault, times
            self.scope = set(scope) if scope is not None else DEFAULT_SCOPE[fault]
            self._counts = {}
            self.hits = 0

    def fires(self, kind, name):
        """Whether the fault applies to this request (counts it if so)."""
        with self._lock:
            if self.fault == "none" or kind not in self.scope:
                return False
            n = self._counts.get(name, 0)
            if self.times is not None and n >= self.times:
                return False
            self._counts[name] = n + 1
            self.hits += 1
            return True

    # -- lifecycle
    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        """Listen on two loopback ports (hub, other) and serve in background threads."""
        for origin in ("hub", "other"):
            srv = _Server(("127.0.0.1", 0), _Handler)
            srv.ctx, srv.origin = self, origin
            self._servers[origin] = srv
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1},
                                 name="fault-server-" + origin, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self):
        """Stop serving, end open connections, and wait (bounded) for handlers."""
        self.stop_event.set()
        for srv in self._servers.values():
            srv.shutdown()
            srv.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_WAIT
        while self._conns and time.monotonic() < deadline:
            time.sleep(0.05)
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._servers, self._threads = {}, []

    def track(self, conn, add):
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    # -- addresses
    def url(self, origin="hub"):
        return "http://127.0.0.1:%d" % self._servers[origin].server_address[1]

    @property
    def endpoint(self):
        return self.url("hub")

    @property
    def other_url(self):
        return self.url("other")

    # -- records
    def record(self, entry):
        with self._lock:
            self._records.append(entry)

    def requests(self, origin=None):
        """Copies of the recorded requests (dicts: origin, method, path, headers with
        lower-case names, kind, status, fault), oldest first; ORIGIN: hub or other."""
        with self._lock:
            recs = [dict(r, headers=dict(r["headers"])) for r in self._records]
        return [r for r in recs if origin is None or r["origin"] == origin]


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


def parse_range(header, size):
    """(start, end inclusive, partial) for a Range header; None if unsatisfiable.

    Multiple ranges or a malformed header yield the whole file (RFC 9110 allows ignoring)."""
    whole = (0, size - 1, False)
    if not header or not header.startswith("bytes=") or "," in header:
        return whole
    a, _, b = header[6:].strip().partition("-")
    try:
        if a == "":
            n = int(b)
            return (max(0, size - n), size - 1, True) if n > 0 and size > 0 else None
        start = int(a)
        end = min(int(b), size - 1) if b else size - 1
    except ValueError:
        return whole
    if start >= size or end < start:
        return None
    return start, end, True


def lying_range(start, end, size):
    """A range that is not START-END but names real bytes of the file."""
    if end + 1 < size:
        return start + 1, end + 1
    if start > 0:
        return start - 1, end - 1
    return (1, end) if end >= 1 else (0, 0)


def read_range(path, start, end):
    """Chunks of PATH's bytes START..END inclusive."""
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start + 1
        while left > 0:
            data = f.read(min(CHUNK, left))
            if not data:
                return
            left -= len(data)
            yield data


def flip_data_bytes(chunk, offset, first):
    """CHUNK (at file OFFSET) with the bytes at FIRST, FIRST + 4096, ... inverted."""
    buf = bytearray(chunk)
    p = first if first >= offset else first + -(-(offset - first) // 4096) * 4096
    while p < offset + len(buf):
        buf[p - offset] ^= 0xFF
        p += 4096
    return bytes(buf)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes one hub request and applies the server's fault."""

    protocol_version = "HTTP/1.1"
    timeout = HANDLER_TIMEOUT
    server_version = "qrepack-fault-server"

    # -- plumbing
    @property
    def ctx(self):
        return self.server.ctx

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        self.ctx.track(self.connection, True)

    def handle(self):
        try:
            super().handle()
        except OSError:  # the client reset or timed out between requests
            self.close_connection = True

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        self.ctx.track(self.connection, False)

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def _dispatch(self):
        path = urllib.parse.urlsplit(self.path).path
        self.rec = {"origin": self.server.origin, "method": self.command, "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "kind": None, "status": None, "fault": None, "time": time.time()}
        self.ctx.record(self.rec)
        try:
            self._route(urllib.parse.unquote(path))
        except OSError:  # the client went away, or a write timed out
            self.close_connection = True

    def _route(self, path):
        L = self.ctx.layout
        parts = path.split("/")
        if path.startswith("/cdn/lfs/") and len(parts) >= 5:
            return self._lfs(parts[3], "/".join(parts[4:]))
        if self.server.origin != "hub":
            return self._status(404)
        if path.startswith("/api/models/%s/%s/" % (L.org, L.repo)):
            return self._api(path)
        prefix = "/%s/%s/resolve/" % (L.org, L.repo)
        if path.startswith(prefix):
            rev, _, name = path[len(prefix):].partition("/")
            return self._resolve(rev, name)
        return self._status(404)

    def _begin(self, kind, name):
        """Note the request's kind; the fault name if it fires, else None."""
        self.rec["kind"] = kind
        fault = self.ctx.fault if self.ctx.fires(kind, name) else None
        self.rec["fault"] = fault
        return fault

    def send_response(self, code, message=None):
        self.rec["status"] = code
        super().send_response(code, message)

    # -- simple answers
    def _status(self, code, headers=()):
        body = b"%d\n" % code
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _status_fault(self, fault):
        """Answer a 429/500 fault; True if one was sent."""
        code = STATUS_FAULTS.get(fault)
        if code is None:
            return False
        self._status(code, [("Retry-After", "0")] if code == 429 else [])
        return True

    def _redirect(self, location, headers=()):
        self.send_response(302)
        self.send_header("Location", location)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # -- routes
    def _api(self, path):
        fault = self._begin("api", path)
        if self._status_fault(fault):
            return
        local = self.ctx.layout.hub_file(path)
        if ".." in path.split("/") or not os.path.isfile(local):
            return self._status(404)
        self._send_file(local, fault, [("Content-Type", "application/json")])

    def _resolve(self, rev, name):
        L = self.ctx.layout
        info = L.files.get(name)
        if rev not in L.revs or info is None:
            self.rec["kind"] = "file"
            return self._status(404)
        commit = [("X-Repo-Commit", L.commit)]
        if not info.is_lfs:
            fault = self._begin("file", name)
            if self._status_fault(fault) or self._redirect_fault(fault, name, info, commit):
                return
            etag = [("ETag", '"%s"' % info.blob_sha1)]
            return self._send_file(L.resolve_file(name), fault, commit + etag)
        fault = self._begin("redirect", name)
        if self._status_fault(fault) or self._redirect_fault(fault, name, info, commit):
            return
        self._redirect(self.ctx.url("hub") + "/cdn" + hub_fixture.cdn_path(name, info),
                       commit + linked_headers(info))

    def _redirect_fault(self, fault, name, info, headers):
        """Answer redirect_loop / redirect_other_origin; True if one was sent."""
        if fault == "redirect_loop":
            self._redirect(self.ctx.url("hub") + self.path, headers + linked_headers(info))
        elif fault == "redirect_other_origin":
            self._redirect(self.ctx.url("other") + "/cdn" + hub_fixture.cdn_path(name, info),
                           headers + linked_headers(info))
        else:
            return False
        return True

    def _lfs(self, sha, name):
        L = self.ctx.layout
        info = L.files.get(name)
        self.rec["kind"] = "lfs"
        if info is None or not info.is_lfs or info.sha256 != sha:
            return self._status(404)
        fault = self._begin("lfs", name)
        if self._status_fault(fault):
            return
        self._send_file(L.cdn_file(name), fault, [("ETag", '"%s"' % info.sha256)])

    # -- bytes
    def _send_file(self, local, fault, headers):
        """Send LOCAL (honouring Range) with FAULT applied to the body."""
        size = os.path.getsize(local)
        rng = parse_range(self.headers.get("Range"), size)
        if rng is None:
            return self._status(416, [("Content-Range", "bytes */%d" % size)])
        start, end, partial = rng
        if fault == "huge_header":
            return self._huge_header()
        if fault == "lying_content_range":
            start, end = lying_range(start, end, size)
            partial = True
        body = self._body(local, start, end, fault)
        if fault == "gzip_body":
            body = [gzip.compress(b"".join(body), mtime=0)]
            headers = list(headers) + [("Content-Encoding", "gzip")]
        length = sum(len(c) for c in body) if fault == "gzip_body" else end - start + 1
        self._send_head(partial, start, end, size, length, headers)
        if self.command != "HEAD" and size > 0:
            self._write_body(body, length, fault)

    def _body(self, local, start, end, fault):
        """The body's chunks (corrupted under corrupt_body)."""
        if end < start:
            return iter(())
        chunks = read_range(local, start, end)
        if fault != "corrupt_body":
            return chunks
        data_start = 0
        if local.endswith(".safetensors"):
            data_start = hub_fixture.safetensors_data_offset(local)
        first = max(start, data_start)
        out, off = [], start
        for c in chunks:
            out.append(flip_data_bytes(c, off, first))
            off += len(c)
        return out

    def _send_head(self, partial, start, end, size, length, headers):
        self.send_response(206 if partial else 200)
        self.send_header("Accept-Ranges", "bytes")
        if not any(k == "Content-Type" for k, _ in headers):
            self.send_header("Content-Type", "application/octet-stream")
        for k, v in headers:
            self.send_header(k, v)
        if partial:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _write_body(self, chunks, length, fault):
        """Write the body, stopping halfway for the truncating faults."""
        cut = length // 2 if fault in ("reset_mid_body", "short_body", "stall_body") else None
        sent = 0
        for c in chunks:
            if cut is not None and sent + len(c) >= cut:
                self.wfile.write(c[:cut - sent])
                return self._after_cut(fault)
            if fault == "slow":
                self._paced_write(c)
            else:
                self.wfile.write(c)
            sent += len(c)
            if self.ctx.stop_event.is_set():
                return self._abort(reset=False)

    def _after_cut(self, fault):
        if fault == "stall_body":
            self._stall()
        self._abort(reset=(fault == "reset_mid_body"))

    def _paced_write(self, chunk):
        """Write CHUNK at the server's rate, in 4 KiB steps."""
        step = 4096
        for i in range(0, len(chunk), step):
            if self.ctx.stop_event.wait(step / self.ctx.rate):
                return
            self.wfile.write(chunk[i:i + step])

    def _stall(self):
        """Send nothing until stall_seconds pass, the client closes, or the server stops."""
        deadline = time.monotonic() + self.ctx.stall_seconds
        while time.monotonic() < deadline and not self.ctx.stop_event.is_set():
            r, _, _ = select.select([self.connection], [], [], 0.2)
            if r and peer_closed(self.connection):
                return
            if r:
                self.ctx.stop_event.wait(0.2)

    def _abort(self, reset):
        """End the connection now: RST when RESET, else an orderly close."""
        self.close_connection = True
        if reset:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connection.close()

    def _huge_header(self):
        """A header that never ends (bounded by bytes, time, client and stop)."""
        self.rec["status"] = 200
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n")
        line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
        block = line * (CHUNK // len(line))
        sent, deadline = 0, time.monotonic() + self.ctx.huge_header_seconds
        while sent < HUGE_HEADER_BYTES and time.monotonic() < deadline:
            if self.ctx.stop_event.is_set():
                break
            self.wfile.write(block)
            sent += len(block)
        self._abort(reset=False)


def linked_headers(info):
    return [("X-Linked-Etag", '"%s"' % info.sha256), ("X-Linked-Size", str(info.size))]


def peer_closed(conn):
    """Whether a readable socket's peer has closed (or reset) it."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def main(argv):
    ap = argparse.ArgumentParser(description="Serve a hub_fixture ROOT with a fault.")
    ap.add_argument("root")
    ap.add_argument("fault", choices=FAULTS)
    ap.add_argument("--times", type=int, default=None, help="per file (default: always)")
    ap.add_argument("--scope", default=None, help="comma-separated kinds: " + ",".join(KINDS))
    ap.add_argument("--rate", type=int, default=64 * 1024)
    ap.add_argument("--stall-seconds", type=float, default=MAX_STALL)
    ap.add_argument("--seconds", type=float, default=120, help="stop after this long (max 3600)")
    a = ap.parse_args(argv)
    scope = a.scope.split(",") if a.scope else None
    with FaultServer(a.root, a.fault, a.times, scope, a.rate, a.stall_seconds) as srv:
        print("HF_ENDPOINT=%s\nother %s\ncommit %s" % (
            srv.endpoint, srv.other_url, srv.layout.commit), flush=True)
        srv.stop_event.wait(max(0.0, min(a.seconds, 3600.0)))
        for r in srv.requests():
            keys = ("origin", "method", "path", "kind", "status", "fault")
            print(json.dumps({k: r[k] for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
