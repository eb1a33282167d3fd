#!/usr/bin/python3
"""End-to-end tests of qrepack's remote sources (hf:// and http(s) directories).

  remote_sources.py CLI_PATH CASE [--keep]     run one case; exit 0 and print "CASE ok" on pass,
                                               1 with a reason on stderr on failure, 2 on usage
  remote_sources.py --list                     print the case names

Each case works in its own temp dir: a tiny `qrepack fixture moe-fp8`, a hub laid out from it
(hub_fixture.build_hub), nginx (hub_fixture.NginxHub) or the fault-injecting server
(fault_server.FaultServer), and the CLI run with HF_ENDPOINT, fast retry settings and HOME in the
temp dir (no real token file or cache is read), always under a timeout. --keep leaves the temp
dir in place and prints its path.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_server  # noqa: E402
import hub_fixture  # noqa: E402

ORG, REPO = "org", "repo"
HF_SOURCE = "hf://%s/%s" % (ORG, REPO)
TOKEN = "secret-token-123"
CONVERT_FLAGS = ["--to", "int4-g128", "--max-shard-size", "100kB"]
CORRUPT_SHARD = "model-00002-of-00004.safetensors"
CLI_TIMEOUT = 120       # seconds any one CLI run may take
FAIL_DEADLINE = 30      # seconds a run that must fail may take (retries are 50 ms apart)
HEADER_SLACK = 64 * 1024  # bytes beyond a shard's header a header read may fetch
HTTP_ENV = {"QREPACK_HTTP_RETRIES": "4", "QREPACK_HTTP_BACKOFF_MS": "50",
            "QREPACK_HTTP_STALL_SECONDS": "3"}
EXIT_FAILURES = (1, 2, 3)  # README's exit codes for a gate, bad input, I/O


class CaseFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CaseFailure(msg)


class Run:
    """A finished CLI run."""

    def __init__(self, args, rc, stdout, stderr, seconds):
        self.args, self.rc, self.seconds = args, rc, seconds
        self.stdout, self.stderr = stdout, stderr

    def describe(self):
        return "`%s` exit %s after %.1f s\n--- stderr (tail)\n%s" % (
            " ".join(self.args), self.rc, self.seconds, self.stderr[-3000:])


# ---------------------------------------------------------------- the case's world
class Ctx:
    """One case's temp dir, fixture, hub tree and CLI runner."""

    def __init__(self, cli, case):
        self.cli = cli
        self.tmp = tempfile.mkdtemp(prefix="qrepack-remote-%s-" % case)
        self.fixture = os.path.join(self.tmp, "fixture")
        self.hub_root = os.path.join(self.tmp, "hub")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        self._local = {}
        self.extra_env = {}     # added to every CLI run's environment
        self.fixture_args = []  # added to `fixture moe-fp8`
        self.fixture_kind = "moe-fp8"

    def env(self, endpoint=None, token=None):
        """The CLI's environment: no HF_* or proxy settings from outside, HOME in the temp dir."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HF_", "HUGGING")) and not k.lower().endswith("_proxy")}
        env.update(HTTP_ENV, HOME=self.home, XDG_CACHE_HOME=os.path.join(self.home, ".cache"),
                   XDG_CONFIG_HOME=os.path.join(self.home, ".config"),
                   no_proxy="127.0.0.1,localhost", NO_PROXY="127.0.0.1,localhost")
        if endpoint:
            env["HF_ENDPOINT"] = endpoint
        if token:
            env["HF_TOKEN"] = token
        env.update(self.extra_env)
        return env

    def start(self, args, endpoint=None, token=None):
        """Start the CLI with ARGS in its own process group."""
        return subprocess.Popen([self.cli] + args, env=self.env(endpoint, token), cwd=self.tmp,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    def run(self, args, endpoint=None, token=None, timeout=CLI_TIMEOUT):
        """Run the CLI to completion; a run over TIMEOUT is killed and fails the case."""
        t0 = time.monotonic()
        proc = self.start(args, endpoint, token)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out, err = proc.communicate()
            raise CaseFailure("`%s` did not finish within %d s\n%s" % (
                " ".join(args), timeout, err[-3000:]))
        return Run(args, proc.returncode, out, err, time.monotonic() - t0)

    def make_fixture(self):
        r = self.run(["fixture", self.fixture_kind, "-o", self.fixture] + self.fixture_args)
        check(r.rc == 0, "fixture failed: " + r.describe())

    def build_hub(self, revisions=("main",)):
        """Fixture + hub tree; returns the hub's file table."""
        self.make_fixture()
        return hub_fixture.build_hub(self.fixture, self.hub_root, ORG, REPO,
                                     revisions=revisions)

    def out_path(self, label):
        """OUT inside a fresh parent dir of its own (so leftovers beside it are visible)."""
        parent = os.path.join(self.tmp, label)
        os.makedirs(parent)
        return os.path.join(parent, "out")

    def local_reference(self, flags=CONVERT_FLAGS):
        """OUT of the same conversion from the local fixture (made once per flag set)."""
        key = tuple(flags)
        if key not in self._local:
            out = self.out_path("local%d" % len(self._local))
            r = self.run(["convert", self.fixture, "-o", out] + list(flags))
            expect_success(r, "local convert")
            self._local[key] = out
        return self._local[key]

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def kill_group(proc):
    """SIGKILL the process group of PROC (a CLI run this script started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- assertions
def expect_success(run, what):
    check(run.rc == 0, "%s failed: %s" % (what, run.describe()))


def error_line(run):
    """The last non-empty stderr line, which must be qrepack's one-line error."""
    lines = [l for l in run.stderr.splitlines() if l.strip()]
    check(lines, "no error message on stderr: " + run.describe())
    line = lines[-1]
    check(line.startswith("qrepack: error:"),
          "stderr does not end in a one-line 'qrepack: error:' message: " + run.describe())
    return line


def expect_failure(run, out, line_needles=(), needles=(), deadline=FAIL_DEADLINE):
    """RUN failed cleanly: exit 1-3, one-line error (holding LINE_NEEDLES; NEEDLES anywhere in
    stderr), within DEADLINE seconds, nothing left at OUT or beside it."""
    check(run.rc in EXIT_FAILURES, "expected a clean failure (exit 1, 2 or 3): " + run.describe())
    line = error_line(run).lower()
    for n in line_needles:
        check(n.lower() in line, "error line lacks %r: %s" % (n, run.describe()))
    for n in needles:
        check(n.lower() in run.stderr.lower(), "stderr lacks %r: %s" % (n, run.describe()))
    check(run.seconds < deadline,
          "took %.1f s (limit %d s): %s" % (run.seconds, deadline, run.describe()))
    expect_nothing_left(out, run)


def expect_nothing_left(out, run=None):
    check(not os.path.lexists(out), "OUT exists after a failed run: %s" % out)
    left = sorted(os.listdir(os.path.dirname(out)))
    check(not left, "files left beside OUT: %s%s" % (left, "\n" + run.describe() if run else ""))


def tree_files(d):
    return sorted(hub_fixture.checkpoint_files(d))


def expect_same_output(got, want):
    """GOT holds the files of WANT with the same bytes (qrepack.json excepted: it names the
    source); every *.safetensors file byte-identical."""
    gf = [f for f in tree_files(got) if f not in ("qrepack.json", "llama_meta.json")]
    wf = [f for f in tree_files(want) if f not in ("qrepack.json", "llama_meta.json")]
    check(gf == wf, "output files differ: %s vs local %s" % (gf, wf))
    check(any(f.endswith(".safetensors") for f in gf), "no safetensors in output: %s" % gf)
    for f in gf:
        with open(os.path.join(got, f), "rb") as a, open(os.path.join(want, f), "rb") as b:
            check(a.read() == b.read(), "%s differs from the local conversion's" % f)


def expect_commit_recorded(out, commit):
    with open(os.path.join(out, "qrepack.json")) as f:
        check(commit in f.read(), "qrepack.json does not mention commit %s" % commit)


def convert_and_compare(ctx, source, endpoint=None, token=None, flags=CONVERT_FLAGS,
                        label="remote"):
    """Convert SOURCE and check the output equals the local conversion; returns OUT."""
    out = ctx.out_path(label)
    r = ctx.run(["convert", source, "-o", out] + list(flags), endpoint, token)
    expect_success(r, "convert " + source)
    expect_same_output(out, ctx.local_reference(flags))
    return out


# ---------------------------------------------------------------- nginx cases
def case_inspect_hf(ctx):
    """inspect hf:// prints what inspect of the local dir prints, reading only headers."""
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        for extra in ([], ["--json"]):
            before = len(hub.access_log_lines("cdn"))
            local = ctx.run(["inspect", ctx.fixture] + extra)
            remote = ctx.run(["inspect", HF_SOURCE] + extra, hub.endpoint)
            expect_success(local, "local inspect")
            expect_success(remote, "inspect " + HF_SOURCE)
            compare_inspect(normalize(local.stdout, ctx.fixture),
                            normalize(remote.stdout, ctx.fixture), bool(extra))
            # Each run on its own: one inspect reads headers only.
            expect_header_reads_only(hub.access_log_lines("cdn")[before:], ctx.fixture)


def normalize(text, local_dir):
    """TEXT with the source's name (local dir, hf://org/repo[@rev], a URL) replaced by <SRC>."""
    text = text.replace(local_dir, "<SRC>")
    text = re.sub(r"hf://%s/%s(@[\w.\-]+)?" % (ORG, REPO), "<SRC>", text)
    return re.sub(r"https?://127\.0\.0\.1:\d+/plain/?", "<SRC>", text)


def compare_inspect(local, remote, is_json):
    if is_json:  # the top-level "path" names the source however the reader spells it
        local, remote = json.loads(local), json.loads(remote)
        for doc in (local, remote):
            doc.pop("path", None)
    check(local == remote, "inspect output differs:\n--- local\n%s\n--- remote\n%s" % (
        str(local)[:3000], str(remote)[:3000]))


def expect_header_reads_only(cdn_log, fixture):
    """Every shard was read, each GET by Range, and no more than its header (+ slack)."""
    got = {}
    for e in cdn_log:
        name = e["uri"].split("?")[0].rsplit("/", 1)[-1]
        if e["method"] != "GET" or not name.endswith(".safetensors"):
            continue
        check(e["range"] and e["status"] == 206,
              "GET of %s without a Range (status %d): full-body read" % (name, e["status"]))
        got[name] = got.get(name, 0) + e["body_bytes"]
    shards = [f for f in tree_files(fixture) if f.endswith(".safetensors")]
    for s in shards:
        path = os.path.join(fixture, s)
        limit = min(hub_fixture.safetensors_data_offset(path) + HEADER_SLACK,
                    os.path.getsize(path) - 1)
        check(s in got, "inspect never read %s from the CDN" % s)
        check(got[s] <= limit,
              "inspect fetched %d bytes of %s (header read limit %d)" % (got[s], s, limit))


def case_convert_hf_equals_local(ctx):
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        out = convert_and_compare(ctx, HF_SOURCE, hub.endpoint)
    expect_commit_recorded(out, hub_fixture.load_hub(ctx.hub_root).commit)


def case_convert_plain_https(ctx):
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        convert_and_compare(ctx, hub.plain_url, hub.endpoint)
        check(any(e["uri"].endswith(".safetensors") for e in hub.access_log_lines("plain")),
              "no shard was read from the plain directory")


def case_revision_tag(ctx):
    ctx.build_hub(revisions=("main", "v1"))
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        convert_and_compare(ctx, HF_SOURCE + "@v1", hub.endpoint)
        uris = [e["uri"] for e in hub.access_log_lines("hub")]
    check(any("/revision/v1" in u for u in uris), "revision v1 was never asked for: %s" % uris)
    check(not any("/revision/main" in u for u in uris), "@v1 asked for revision main")


def case_corrupt_shard(ctx):
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        hub.corrupt(CORRUPT_SHARD)
        out = ctx.out_path("remote")
        r = ctx.run(["convert", HF_SOURCE, "-o", out] + CONVERT_FLAGS, hub.endpoint)
    expect_failure(r, out, needles=(CORRUPT_SHARD, "sha256"), deadline=CLI_TIMEOUT)


def case_token_not_forwarded(ctx):
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        convert_and_compare(ctx, HF_SOURCE, hub.endpoint, TOKEN)
        hub_log, cdn_log = hub.access_log_lines("hub"), hub.access_log_lines("cdn")
    check(hub_log and cdn_log, "expected requests on both origins (hub %d, cdn %d)" % (
        len(hub_log), len(cdn_log)))
    unauth = [e["uri"] for e in hub_log if e["auth"] != "Bearer " + TOKEN]
    check(not unauth, "hub requests without 'Authorization: Bearer <HF_TOKEN>': %s" % unauth[:5])
    leaked = [e["uri"] for e in cdn_log if e["auth"]]
    check(not leaked, "Authorization reached the CDN origin: %s" % leaked[:5])


# ---------------------------------------------------------------- fault-server cases
def fault_run(ctx, fault, times=None, token=None, **server_args):
    """Convert HF_SOURCE from a FaultServer with FAULT; returns (run, out, server)."""
    ctx.build_hub()
    out = ctx.out_path("remote")
    with fault_server.FaultServer(ctx.hub_root, fault, times, **server_args) as srv:
        r = ctx.run(["convert", HF_SOURCE, "-o", out] + CONVERT_FLAGS, srv.endpoint, token)
    check(srv.hits > 0, "fault %s never fired (the harness tested nothing)" % fault)
    return r, out, srv


def fault_recovers(fault, times):
    """A case where FAULT happens TIMES per file and the conversion must retry through it."""
    def case(ctx):
        r, out, _ = fault_run(ctx, fault, times)
        expect_success(r, "convert through %s" % fault)
        expect_same_output(out, ctx.local_reference())
    case.__doc__ = "%s %s time(s) per file: transparent retry" % (fault, times)
    return case


def fault_fails(fault, line_needles=(), deadline=FAIL_DEADLINE, env=None, **server_args):
    """A case where FAULT persists and the conversion must fail cleanly and promptly (ENV: added
    to the CLI's environment)."""
    def case(ctx):
        ctx.extra_env.update(env or {})
        r, out, _ = fault_run(ctx, fault, None, **server_args)
        expect_failure(r, out, line_needles, deadline=deadline)
    case.__doc__ = "%s always: one-line error, nothing at OUT" % fault
    return case


# The stall cases detect stalls after 1 s (the knob's minimum) instead of HTTP_ENV's 3 s: the
# same detection and retry path, a third of the waiting. A stall must be detected within about a
# second of that (the guard's precision): four tries must fail well inside 20 s.
STALL_ENV = {"QREPACK_HTTP_STALL_SECONDS": "1"}


def case_stall_body(ctx):
    """One stall per file (server would wait 60 s): the 1 s stall timeout retries, succeeds."""
    ctx.extra_env.update(STALL_ENV)
    r, out, _ = fault_run(ctx, "stall_body", 1)
    expect_success(r, "convert through one stall per file")
    check(r.seconds < 20, "took %.1f s: the stall was waited out, not detected" % r.seconds)
    expect_same_output(out, ctx.local_reference())


def case_redirect_other_origin(ctx):
    """LFS bytes on another origin: the token goes to the hub only."""
    r, out, srv = fault_run(ctx, "redirect_other_origin", token=TOKEN)
    expect_success(r, "convert via another origin")
    expect_same_output(out, ctx.local_reference())
    other, hub = srv.requests("other"), srv.requests("hub")
    check(other, "the other origin got no request")
    leaked = [q["path"] for q in other if "authorization" in q["headers"]]
    check(not leaked, "Authorization reached the other origin: %s" % leaked[:5])
    check(all("authorization" in q["headers"] for q in hub), "hub requests without Authorization")


def case_kill_resume(ctx):
    """SIGKILL a paced URL convert --resume after ~1 s; the rerun finishes it identically."""
    ctx.build_hub()
    flags = CONVERT_FLAGS + ["--resume"]
    out = ctx.out_path("remote")
    args = ["convert", HF_SOURCE, "-o", out] + flags
    with fault_server.FaultServer(ctx.hub_root, "slow", rate=48 * 1024) as srv:
        proc = ctx.start(args, srv.endpoint)
        time.sleep(1.0)
        running = proc.poll() is None
        kill_group(proc)
        proc.communicate(timeout=CLI_TIMEOUT)
        check(running, "the paced convert finished within 1 s; lower the rate")
        srv.set_fault("none")
        r = ctx.run(args, srv.endpoint)
    expect_success(r, "convert --resume after SIGKILL")
    expect_same_output(out, ctx.local_reference(flags))
    left = sorted(os.listdir(os.path.dirname(out)))
    check(left == ["out"], "files beside OUT after the resumed run: %s" % left)


def case_corrupt_resume(ctx):
    """A resumable URL convert whose shards fail their hash records no output shard as done,
    so the --resume after the server is fixed rebuilds everything from good bytes. One source
    shard of many 64 KiB chunks: output shards are published while the corrupt source is still
    streaming, before its hash can be checked."""
    ctx.fixture_args = ["--max-shard-size", "4MB"]
    ctx.extra_env = {"QREPACK_HTTP_CHUNK_KIB": "64"}
    ctx.build_hub()
    flags = CONVERT_FLAGS + ["--resume"]
    out = ctx.out_path("remote")
    args = ["convert", HF_SOURCE, "-o", out] + flags
    with fault_server.FaultServer(ctx.hub_root, "corrupt_body") as srv:
        r = ctx.run(args, srv.endpoint)
        check(r.rc != 0, "convert --resume of corrupt shards succeeded")
        check("sha256" in r.stderr.lower(), "no sha256 error: %s" % r.stderr[-500:])
        progress = os.path.join(out, ".qrepack-progress.json")
        if os.path.exists(progress):
            with open(progress) as f:
                done = json.load(f).get("shards", {})
            check(not done, "output shards recorded as done from corrupt bytes: %s" %
                  sorted(done)[:5])
        srv.set_fault("none")
        r = ctx.run(args, srv.endpoint)
    expect_success(r, "convert --resume after the corrupt run")
    expect_same_output(out, ctx.local_reference(flags))


def case_other_commands(ctx):
    """verify, reshard, oracle and --shard I/N workers + merge read hf:// as a directory."""
    ctx.build_hub()
    with hub_fixture.NginxHub(ctx.hub_root) as hub:
        ep = hub.endpoint
        local = ctx.local_reference()
        expect_success(ctx.run(["verify", HF_SOURCE, local, "--max-rel-err", "0.5"], ep),
                       "verify hf:// against the local conversion")
        for label, src in (("resh-remote", HF_SOURCE), ("resh-local", ctx.fixture)):
            out = ctx.out_path(label)
            expect_success(ctx.run(["reshard", src, "-o", out, "--max-shard-size", "100kB"], ep),
                           "reshard " + src)
        expect_same_output(os.path.join(ctx.tmp, "resh-remote", "out"),
                           os.path.join(ctx.tmp, "resh-local", "out"))
        oracles = []
        for src in (HF_SOURCE, ctx.fixture):
            path = os.path.join(ctx.tmp, "oracle-%d.json" % len(oracles))
            expect_success(ctx.run(["oracle", src, "-o", path], ep), "oracle " + src)
            with open(path, "rb") as f:
                oracles.append(f.read())
        check(oracles[0] == oracles[1], "oracle from hf:// differs from the local one")
        out = ctx.out_path("sharded")
        for i in range(2):
            expect_success(ctx.run(["convert", HF_SOURCE, "-o", out, "--shard", "%d/2" % i]
                                   + CONVERT_FLAGS, ep), "convert --shard %d/2" % i)
        expect_success(ctx.run(["merge", out], ep), "merge")
    expect_same_output(out, local)


def container_target(kind, meta):
    """A family whose runtime has its own container (docs/targets.md), converted from the hub:
    the same files as from the local fixture (META, the engine's meta file, among them); its
    oracle from the hub has the local one's ids."""
    def case(ctx):
        ctx.fixture_kind = kind
        ctx.build_hub()
        with hub_fixture.NginxHub(ctx.hub_root) as hub:
            out = convert_and_compare(ctx, HF_SOURCE, hub.endpoint, flags=[])
            # The family's own forward pass reads hf:// too: the same oracle ids.
            ids = []
            for src in (HF_SOURCE, ctx.fixture):
                path = os.path.join(ctx.tmp, "oracle-%d.json" % len(ids))
                expect_success(ctx.run(["oracle", src, "-o", path], hub.endpoint),
                               "oracle " + src)
                with open(path) as f:
                    ids.append(json.load(f)["full_ids"])
            check(ids[0] == ids[1], "oracle from hf:// differs from the local one")
        check(os.path.exists(os.path.join(out, meta)), "no %s in the output" % meta)
        expect_commit_recorded(out, hub_fixture.load_hub(ctx.hub_root).commit)
    return case


CASES = {
    "inspect_hf": case_inspect_hf,
    "convert_hf_equals_local": case_convert_hf_equals_local,
    "convert_plain_https": case_convert_plain_https,
    "revision_tag": case_revision_tag,
    "corrupt_shard": case_corrupt_shard,
    "token_not_forwarded": case_token_not_forwarded,
    "reset_mid_body": fault_recovers("reset_mid_body", 1),
    "status_429_then_ok": fault_recovers("status_429_then_ok", 2),
    "short_body": fault_recovers("short_body", 1),
    "status_500_always": fault_fails("status_500_always", line_needles=("http://127.0.0.1",)),
    "stall_body": case_stall_body,
    "stall_body_always": fault_fails("stall_body", ("no byte from the server for 1 s",),
                                     deadline=20, env=STALL_ENV),
    "lying_content_range": fault_fails("lying_content_range"),
    "corrupt_body": fault_fails("corrupt_body"),
    "redirect_loop": fault_fails("redirect_loop"),
    "gzip_body": fault_fails("gzip_body"),
    "huge_header": fault_fails("huge_header"),
    "redirect_other_origin": case_redirect_other_origin,
    "kill_resume": case_kill_resume,
    "corrupt_resume": case_corrupt_resume,
    "other_commands": case_other_commands,
    "container_qwen36": container_target("qwen36", "qwen36_meta.json"),
    "container_llama": container_target("llama", "llama_meta.json"),
}


def main(argv):
    if argv == ["--list"]:
        print("\n".join(CASES))
        return 0
    keep = "--keep" in argv
    args = [a for a in argv if a != "--keep"]
    if len(args) != 2 or args[1] not in CASES:
        print("usage: remote_sources.py CLI_PATH CASE [--keep] | --list\ncases: " + " ".join(CASES),
              file=sys.stderr)
        return 2
    cli, case = os.path.abspath(args[0]), args[1]
    if not os.access(cli, os.X_OK):
        print("%s: not an executable" % cli, file=sys.stderr)
        return 2
    ctx = Ctx(cli, case)
    try:
        CASES[case](ctx)
    except CaseFailure as e:
        print("%s FAILED: %s" % (case, e), file=sys.stderr)
        return 1
    finally:
        if keep:
            print("kept %s" % ctx.tmp, file=sys.stderr)
        else:
            ctx.cleanup()
    print("%s ok" % case)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
