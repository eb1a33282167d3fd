#!/usr/bin/python3
"""A local Hugging Face hub for qrepack's remote-source tests, served by nginx.

build_hub() lays a checkpoint directory out the way qrepack's hf:// reader requests it:

  ROOT/hub.json                                    manifest (what load_hub() reads back)
  ROOT/hub/api/models/ORG/REPO/revision/REV        {"id", "sha", "siblings"} for each REV and COMMIT
  ROOT/hub/api/models/ORG/REPO/tree/REV            [{"type","path","size","oid"[,"lfs"]}, ...]
  ROOT/hub/ORG/REPO/resolve/COMMIT/FILE            non-LFS files (hub answers 200/206 + ETag)
  ROOT/cdn/lfs/SHA256/FILE                         LFS files (hub answers 302 to the CDN origin)
  ROOT/plain/FILE                                  the checkpoint as a plain https-style directory

Files are hard links to the checkpoint where possible (copies otherwise); corrupt() replaces a
served file with a modified copy, so the checkpoint itself is never changed.

NginxHub(ROOT) runs /usr/sbin/nginx in the foreground (master_process off, so it never switches
user and works as root or as a normal user) with three loopback server blocks -- hub, CDN and
plain directory -- each with its own JSON-lines access log recording Range and Authorization.

nginx is started through setpriv --pdeathsig KILL, so it dies with the Python process that
started it whichever way that process ends (even SIGKILL); a server never outlives its owner.

CLI (for trying it by hand; the server stops by itself after --seconds):
  hub_fixture.py build CHECKPOINT_DIR ROOT [--org O --repo R --commit HEX --rev main --rev v1]
  hub_fixture.py serve CHECKPOINT_DIR [--seconds 120]
`serve` stops nginx and removes its temp tree on SIGTERM, SIGINT and SIGHUP, and takes SIGTERM
itself when the process that started it exits (a demo or bench script killed mid-run).
"""
import argparse
import collections
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NGINX = "/usr/sbin/nginx"
SETPRIV = "/usr/bin/setpriv"  # util-linux (Essential): --pdeathsig ties nginx to its parent
PR_SET_PDEATHSIG = 1
LFS_THRESHOLD = 10 * 1000 * 1000  # files above 10 MB are LFS even if not *.safetensors
MANIFEST = "hub.json"
SERVERS = ("hub", "cdn", "plain")
DEFAULT_COMMIT = hashlib.sha1(b"qrepack remote-source test commit").hexdigest()

FileInfo = collections.namedtuple("FileInfo", "size sha256 blob_sha1 is_lfs")


# ---------------------------------------------------------------- hashes and git objects
def git_blob_sha1(data):
    """The git object id of DATA stored as a blob."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256, size):
    """The git-lfs pointer text git stores in place of an LFS file."""
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (
        sha256.encode(), size)


def is_lfs_file(name, size):
    """Whether the hub stores NAME through LFS (every safetensors, anything over 10 MB)."""
    return name.endswith(".safetensors") or size > LFS_THRESHOLD


def file_info(path, name):
    """FileInfo of the file at PATH published as NAME."""
    with open(path, "rb") as f:
        data = f.read()
    return FileInfo(len(data), hashlib.sha256(data).hexdigest(), git_blob_sha1(data),
                    is_lfs_file(name, len(data)))


def safetensors_data_offset(path):
    """Byte offset of a safetensors file's tensor data (8 + header length)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8:
        return 0
    return 8 + int.from_bytes(head, "little")


# ---------------------------------------------------------------- URL paths
def revision_api_path(org, repo, rev):
    return "/api/models/%s/%s/revision/%s" % (org, repo, rev)


def tree_api_path(org, repo, rev):
    return "/api/models/%s/%s/tree/%s" % (org, repo, rev)


def resolve_path(org, repo, rev, name):
    return "/%s/%s/resolve/%s/%s" % (org, repo, rev, name)


def cdn_path(name, info):
    """Path of an LFS file on the CDN origin."""
    return "/lfs/%s/%s" % (info.sha256, name)


# ---------------------------------------------------------------- API documents
def tree_entry(name, info):
    """One element of the tree API's answer for NAME."""
    if not info.is_lfs:
        return {"type": "file", "path": name, "size": info.size, "oid": info.blob_sha1}
    pointer = lfs_pointer(info.sha256, info.size)
    return {"type": "file", "path": name, "size": info.size, "oid": git_blob_sha1(pointer),
            "lfs": {"oid": info.sha256, "size": info.size, "pointerSize": len(pointer)}}


def tree_document(files):
    """The recursive tree listing: directories (as the hub lists them) and files, by path."""
    entries = [tree_entry(n, files[n]) for n in files]
    dirs = sorted({os.path.dirname(n) for n in files} - {""})
    for d in dirs:  # the hub reports a directory's tree oid; any stable hex stands in for it
        entries.append({"type": "directory", "path": d, "size": 0,
                        "oid": hashlib.sha1(b"tree " + d.encode()).hexdigest()})
    return sorted(entries, key=lambda e: e["path"])


def revision_document(org, repo, commit, files):
    return {"id": "%s/%s" % (org, repo), "sha": commit,
            "siblings": [{"rfilename": n} for n in sorted(files)]}


# ---------------------------------------------------------------- laying out the tree
def link_or_copy(src, dst):
    """Hard-link SRC at DST (copy when linking is impossible)."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_json(path, doc):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def checkpoint_files(checkpoint_dir):
    """Relative names of the regular files under CHECKPOINT_DIR, sorted."""
    names = []
    for dirpath, dirnames, filenames in os.walk(checkpoint_dir):
        dirnames.sort()
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            if os.path.isfile(full) and not os.path.islink(full):
                names.append(os.path.relpath(full, checkpoint_dir).replace(os.sep, "/"))
    return sorted(names)


def build_hub(checkpoint_dir, root_dir, org, repo, commit=DEFAULT_COMMIT, revisions=("main",)):
    """Lay CHECKPOINT_DIR out as hub repo ORG/REPO at COMMIT under ROOT_DIR.

    Every name in REVISIONS (and COMMIT itself) resolves to COMMIT. Returns
    {file: FileInfo(size, sha256, blob_sha1, is_lfs)}."""
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise ValueError("commit must be 40 lower-case hex digits: %r" % commit)
    files = {}
    for name in checkpoint_files(checkpoint_dir):
        src = os.path.join(checkpoint_dir, name)
        info = files[name] = file_info(src, name)
        link_or_copy(src, os.path.join(root_dir, "plain", name))
        if info.is_lfs:
            link_or_copy(src, os.path.join(root_dir, "cdn") + cdn_path(name, info))
        else:
            link_or_copy(src, os.path.join(root_dir, "hub") + resolve_path(org, repo, commit, name))
    hub = os.path.join(root_dir, "hub")
    for rev in unique_revs(commit, revisions):
        write_json(hub + revision_api_path(org, repo, rev),
                   revision_document(org, repo, commit, files))
        write_json(hub + tree_api_path(org, repo, rev), tree_document(files))
    write_json(os.path.join(root_dir, MANIFEST),
               {"org": org, "repo": repo, "commit": commit, "revisions": list(revisions),
                "checkpoint": os.path.abspath(checkpoint_dir),
                "files": {n: list(i) for n, i in files.items()}})
    return files


def unique_revs(commit, revisions):
    """COMMIT followed by REVISIONS, without duplicates."""
    out = [commit]
    for r in revisions:
        if r not in out:
            out.append(r)
    return out


class HubLayout:
    """A built hub read back from ROOT/hub.json."""

    def __init__(self, root_dir):
        self.root = os.path.abspath(root_dir)
        with open(os.path.join(self.root, MANIFEST)) as f:
            doc = json.load(f)
        self.org, self.repo, self.commit = doc["org"], doc["repo"], doc["commit"]
        self.revisions = doc["revisions"]
        self.checkpoint = doc["checkpoint"]
        self.files = {n: FileInfo(*v) for n, v in doc["files"].items()}

    @property
    def revs(self):
        """Every name that resolves: the commit, then the revisions."""
        return unique_revs(self.commit, self.revisions)

    def hub_file(self, url_path):
        """Local path of a hub URL path (API documents and non-LFS resolve files)."""
        return os.path.join(self.root, "hub") + url_path

    def resolve_file(self, name):
        """Local path of the bytes the hub serves for non-LFS NAME."""
        return self.hub_file(resolve_path(self.org, self.repo, self.commit, name))

    def cdn_file(self, name):
        return os.path.join(self.root, "cdn") + cdn_path(name, self.files[name])

    def plain_file(self, name):
        return os.path.join(self.root, "plain", name)

    def served_file(self, name, where="cdn"):
        """Local path of NAME as served by WHERE: cdn (LFS bytes; hub for non-LFS) or plain."""
        if where == "plain":
            return self.plain_file(name)
        return self.cdn_file(name) if self.files[name].is_lfs else self.resolve_file(name)

    def shards(self):
        return sorted(n for n in self.files if n.endswith(".safetensors"))


def load_hub(root_dir):
    return HubLayout(root_dir)


def corrupt_file(path):
    """Replace PATH by a copy with one tensor-data byte flipped; returns the flipped offset.

    The file is rewritten and renamed over PATH, so hard links to the original (the
    checkpoint) keep their bytes."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if not data:
        raise ValueError("cannot corrupt empty file %s" % path)
    start = safetensors_data_offset(path) if path.endswith(".safetensors") else 0
    start = min(start, len(data) - 1)
    offset = start + (len(data) - start) // 2
    data[offset] ^= 0xFF
    tmp = path + ".corrupt-tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return offset


# ---------------------------------------------------------------- nginx
def free_port():
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def nginx_quote(value):
    """VALUE as one single-quoted nginx string."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


LOG_FORMAT = (
    '{"method":"$request_method","uri":"$request_uri","status":"$status",'
    '"body_bytes":"$body_bytes_sent","range":"$http_range","auth":"$http_authorization",'
    '"port":"$server_port","msec":"$msec"}')


def nginx_main_config(prefix):
    """The config's main, events and http-level part (server blocks are appended)."""
    p = prefix
    return "\n".join([
        "pid %s/nginx.pid;" % p,
        "error_log %s/error.log warn;" % p,
        "worker_processes 1;",
        "events { worker_connections 512; }",
        "http {",
        "  client_body_temp_path %s/tmp/body;" % p,
        "  proxy_temp_path %s/tmp/proxy;" % p,
        "  fastcgi_temp_path %s/tmp/fastcgi;" % p,
        "  uwsgi_temp_path %s/tmp/uwsgi;" % p,
        "  scgi_temp_path %s/tmp/scgi;" % p,
        "  types { application/json json; }",
        "  default_type application/octet-stream;",
        "  log_format qrepack escape=json %s;" % nginx_quote(LOG_FORMAT),
        "  sendfile on;",
        "  server_tokens off;",
        "  keepalive_timeout 15s;",
        "  gzip off;",
        ""])


def hub_server_block(layout, port, cdn_port, prefix):
    """Server block of the hub origin: API documents, resolve files and LFS redirects."""
    lines = ["  server {",
             "    listen 127.0.0.1:%d;" % port,
             "    root %s/hub;" % layout.root,
             "    access_log %s/hub.log qrepack;" % prefix,
             "    location / { return 404; }",
             "    location ^~ /api/ { types { } default_type application/json; }"]
    canonical = resolve_path(layout.org, layout.repo, layout.commit, "")
    for rev in layout.revs:
        for name in sorted(layout.files):
            lines += resolve_location(layout, rev, name, cdn_port, canonical)
    lines.append("  }")
    return lines


def resolve_location(layout, rev, name, cdn_port, canonical):
    """The exact-match location answering resolve/REV/NAME."""
    info = layout.files[name]
    loc = resolve_path(layout.org, layout.repo, rev, name)
    hdr = ["add_header X-Repo-Commit %s always;" % layout.commit]
    if info.is_lfs:
        target = "http://127.0.0.1:%d%s" % (cdn_port, cdn_path(name, info))
        body = hdr + ["add_header X-Linked-Etag %s always;" % nginx_quote('"%s"' % info.sha256),
                      "add_header X-Linked-Size %d always;" % info.size,
                      "return 302 %s;" % target]
    else:
        body = hdr + ["etag off;",
                      "add_header ETag %s always;" % nginx_quote('"%s"' % info.blob_sha1),
                      "alias %s/hub%s%s;" % (layout.root, canonical, name)]
    return ["    location = %s {" % loc] + ["      " + b for b in body] + ["    }"]


def cdn_server_block(layout, port, prefix):
    return ["  server {",
            "    listen 127.0.0.1:%d;" % port,
            "    root %s/cdn;" % layout.root,
            "    access_log %s/cdn.log qrepack;" % prefix,
            "    location / { return 404; }",
            "    location ^~ /lfs/ { }",
            "  }"]


def plain_server_block(layout, port, prefix):
    """Server block of the plain directory at /plain/ (shards carry X-Linked-Etag)."""
    lines = ["  server {",
             "    listen 127.0.0.1:%d;" % port,
             "    root %s;" % layout.root,
             "    access_log %s/plain.log qrepack;" % prefix,
             "    location / { return 404; }",
             "    location ^~ /plain/ { }"]
    for name in sorted(layout.files):
        info = layout.files[name]
        if info.is_lfs:
            etag = nginx_quote('"%s"' % info.sha256)
            lines += ["    location = /plain/%s {" % name,
                      "      add_header X-Linked-Etag %s always;" % etag,
                      "    }"]
    lines.append("  }")
    return lines


def nginx_config(layout, prefix, ports):
    """The whole nginx.conf for PORTS = {"hub", "cdn", "plain"}."""
    lines = [nginx_main_config(prefix)]
    lines += hub_server_block(layout, ports["hub"], ports["cdn"], prefix)
    lines += cdn_server_block(layout, ports["cdn"], prefix)
    lines += plain_server_block(layout, ports["plain"], prefix)
    lines.append("}")
    return "\n".join(lines) + "\n"


class NginxHub:
    """nginx serving a built hub on three loopback ports; a context manager.

    Attributes once started: endpoint (HF_ENDPOINT), cdn_url, plain_url (".../plain/"),
    ports, prefix (config, logs, pid). Stops by itself on exit (terminate, then kill)."""

    START_SECONDS = 10
    STOP_SECONDS = 5

    def __init__(self, root_dir, prefix=None):
        self.layout = load_hub(root_dir)
        self._own_prefix = prefix is None
        self.prefix = os.path.abspath(
            prefix or tempfile.mkdtemp(prefix="nginx-", dir=self.layout.root))
        self.proc = None
        self.ports = {}

    # -- lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        """Start nginx (a few attempts if a picked port was taken meanwhile)."""
        for d in ("tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        last = ""
        for _ in range(3):
            self.ports = {s: free_port() for s in SERVERS}
            if len(set(self.ports.values())) < len(SERVERS):
                continue
            if self._try_start():
                return self
            last = self.error_log()
        raise RuntimeError("nginx did not start:\n" + last)

    def command(self):
        return [SETPRIV, "--pdeathsig", "KILL", NGINX, "-p", self.prefix + "/", "-c", self.conf_path, "-e",
                os.path.join(self.prefix, "error.log"), "-g", "daemon off; master_process off;"]

    @property
    def conf_path(self):
        return os.path.join(self.prefix, "nginx.conf")

    def _try_start(self):
        with open(self.conf_path, "w") as f:
            f.write(nginx_config(self.layout, self.prefix, self.ports))
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if all(port_answers(p) for p in self.ports.values()):
                return True
            time.sleep(0.05)
        self.stop()
        return False

    def stop(self):
        """Stop nginx: SIGTERM, then SIGKILL after STOP_SECONDS."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(self.STOP_SECONDS)
        self.proc = None

    # -- addresses
    def url(self, server):
        return "http://127.0.0.1:%d" % self.ports[server]

    @property
    def endpoint(self):
        return self.url("hub")

    @property
    def cdn_url(self):
        return self.url("cdn")

    @property
    def plain_url(self):
        return self.url("plain") + "/plain/"

    # -- what tests look at
    def access_log_lines(self, server=None):
        """Parsed access-log entries, each a dict with server, method, uri, status (int),
        body_bytes (int), range, auth, port; SERVER limits them to hub, cdn or plain."""
        out = []
        for s in ([server] if server else SERVERS):
            out += read_access_log(os.path.join(self.prefix, s + ".log"), s)
        return out

    def error_log(self):
        try:
            with open(os.path.join(self.prefix, "error.log")) as f:
                return f.read()
        except OSError:
            return ""

    def corrupt(self, name, where="cdn"):
        """Flip one tensor-data byte of NAME as served (cdn: the CDN copy, or the hub's copy for
        non-LFS files; plain: the plain directory's). The published hashes stay."""
        return corrupt_file(self.layout.served_file(name, where))


def read_access_log(path, server):
    """Entries of one JSON-lines access log (missing file: none)."""
    try:
        with open(path) as f:
            raw = f.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in raw:
        e = json.loads(line)
        e["server"] = server
        e["status"] = int(e["status"])
        e["body_bytes"] = int(e["body_bytes"])
        out.append(e)
    return out


# ---------------------------------------------------------------- CLI
EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _exit_on_signal(signum, _frame):
    """The first of EXIT_SIGNALS ends the process through its `finally` blocks; later ones
    (Ctrl-C then the demo's own SIGTERM, say) are ignored so they cannot cut that cleanup short."""
    for sig in EXIT_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def stop_with_parent():
    """Turn SIGTERM, SIGINT and SIGHUP into a normal exit (so `finally` blocks stop nginx and
    remove the tree) and ask for SIGTERM when the parent process exits."""
    for sig in EXIT_SIGNALS:
        signal.signal(sig, _exit_on_signal)
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent exited before the request took effect
        raise SystemExit(128 + int(signal.SIGTERM))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="lay a checkpoint out as a hub tree")
    b.add_argument("checkpoint")
    b.add_argument("root")
    s = sub.add_parser("serve", help="build into a temp dir and serve it with nginx")
    s.add_argument("checkpoint")
    s.add_argument("--seconds", type=float, default=120, help="stop after this long (max 3600)")
    for p in (b, s):
        p.add_argument("--org", default="org")
        p.add_argument("--repo", default="repo")
        p.add_argument("--commit", default=DEFAULT_COMMIT)
        p.add_argument("--rev", action="append", help="revision names (default: main)")
    a = ap.parse_args(argv)
    revs = tuple(a.rev or ["main"])
    if a.cmd == "build":
        files = build_hub(a.checkpoint, a.root, a.org, a.repo, a.commit, revs)
        for n, i in sorted(files.items()):
            lfs = " lfs" if i.is_lfs else ""
            print("%-40s %10d %s %s%s" % (n, i.size, i.sha256, i.blob_sha1, lfs))
        return 0
    stop_with_parent()
    root = None
    try:
        root = tempfile.mkdtemp(prefix="qrepack-hub-")
        build_hub(a.checkpoint, root, a.org, a.repo, a.commit, revs)
        with NginxHub(root) as hub:
            print("HF_ENDPOINT=%s\ncdn %s\nplain %s\nprefix %s\ncommit %s" % (
                hub.endpoint, hub.cdn_url, hub.plain_url, hub.prefix, a.commit), flush=True)
            time.sleep(max(0.0, min(a.seconds, 3600.0)))
    finally:
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
