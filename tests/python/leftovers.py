#!/usr/bin/python3
"""Nothing the demo's hub section starts outlives it (tests/leftovers_test.cc).

Each case runs scripts/demo-hub.sh (the loopback hub of `make demo`: hub_fixture.py serve +
nginx) with a tag in its environment and its own TMPDIR, ends it one way, and then requires
that no process carrying the tag is left (every child inherits the environment) and that the
hub made no directory outside the demo's work tree:

  normal        the section runs to its end
  script_kill   the section's script gets SIGKILL while the hub serves (the hub must notice)
  interrupt     Ctrl-C: SIGINT to the whole process group
  wrapper_kill  the hub's Python wrapper gets SIGKILL (nginx must die with it)

usage: leftovers.py CLI_PATH CASE | --list
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
DEMO_HUB = os.path.join(SOURCE, "scripts", "demo-hub.sh")
# Not run_isolated_python's QREPACK_LEFTOVER_TAG: the processes a case starts carry both tags,
# so the outer check of tests/leftovers_test.cc sees them too.
TAG_VAR = "QREPACK_DEMO_HUB_TAG"
START_SECONDS = 60
GONE_SECONDS = 10
RUN_SECONDS = 300


class CaseFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CaseFailure(msg)


def tagged_processes(tag):
    """(pid, command line) of every process whose environment holds TAG_VAR=tag."""
    needle = ("%s=%s" % (TAG_VAR, tag)).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open("/proc/%s/stat" % name, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if needle in env and state != b"Z":
            found.append((int(name), cmd))
    return found


def wait_gone(tag, seconds=GONE_SECONDS):
    """The tagged processes still alive after waiting up to SECONDS for them to end."""
    deadline = time.monotonic() + seconds
    while True:
        left = tagged_processes(tag)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_all(procs):
    for pid, _ in procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Run:
    """demo-hub.sh on a fixture converted as the demo converts it, in a session of its own."""

    def __init__(self, cli, case):
        self.cli = cli
        self.tag = "%s-%d-%d" % (case, os.getpid(), time.monotonic_ns())
        self.base = tempfile.mkdtemp(prefix="qrepack-leftovers-%s-" % case)
        self.tmpdir = os.path.join(self.base, "tmp")  # TMPDIR of everything the case starts
        self.work = os.path.join(self.base, "work")   # the demo's work tree
        os.makedirs(self.tmpdir)
        os.makedirs(self.work)
        self.env = dict(os.environ, TMPDIR=self.tmpdir, **{TAG_VAR: self.tag})
        self.proc = None

    def cli_run(self, *args):
        r = subprocess.run([self.cli] + list(args), env=self.env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           timeout=RUN_SECONDS)
        check(r.returncode == 0, "%s failed: %s" % (" ".join(args), r.stderr[-2000:]))

    def prepare(self):
        fx = os.path.join(self.work, "glm-fp8")
        self.cli_run("fixture", "moe-fp8", "-o", fx)
        self.cli_run("convert", fx, "-o", os.path.join(self.work, "glm-int4"), "--to", "int4-g32")

    def start(self):
        self.proc = subprocess.Popen(["bash", DEMO_HUB, self.cli, self.work], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_serving(self):
        """Wait until the hub answers (its endpoint is in hub.log); returns the wrapper's pid."""
        log = os.path.join(self.work, "hub.log")
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            check(self.proc.poll() is None, "demo-hub.sh ended before the hub served")
            try:
                with open(log) as f:
                    if "HF_ENDPOINT=" in f.read():
                        break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            raise CaseFailure("the hub did not serve within %d s" % START_SECONDS)
        wrappers = [pid for pid, cmd in tagged_processes(self.tag) if "hub_fixture.py" in cmd]
        nginx = [pid for pid, cmd in tagged_processes(self.tag) if "nginx" in cmd]
        check(len(wrappers) == 1, "expected one hub wrapper, found %r" % wrappers)
        check(nginx, "no nginx among the tagged processes while the hub serves")
        return wrappers[0]

    def finish(self, timeout=RUN_SECONDS):
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, _ = self.proc.communicate()
            raise CaseFailure("demo-hub.sh did not end within %d s" % timeout)
        return self.proc.returncode, out.decode(errors="replace")

    def require_nothing_left(self, allow_in_work=False):
        left = wait_gone(self.tag)
        kill_all(left)
        check(not left, "left running: %s" % "; ".join("%d %s" % p for p in left))
        stray = os.listdir(self.tmpdir)
        check(not stray, "left in TMPDIR: %s" % stray)
        hub_tmp = os.path.join(self.work, "hub-tmp")
        if not allow_in_work and os.path.isdir(hub_tmp):
            check(not os.listdir(hub_tmp), "hub tree left: %s" % os.listdir(hub_tmp))

    def cleanup(self):
        kill_all(tagged_processes(self.tag))
        shutil.rmtree(self.base, ignore_errors=True)


def case_normal(run):
    run.start()
    rc, out = run.finish()
    check(rc == 0, "demo-hub.sh exit %d:\n%s" % (rc, out[-3000:]))
    check("identical;" in out, "the hub conversion was not compared:\n" + out[-3000:])
    run.require_nothing_left()


def case_script_kill(run):
    run.env["QREPACK_HTTP_RETRIES"] = "1"  # a conversion left running meets a dead hub once
    run.start()
    run.wait_serving()
    os.kill(run.proc.pid, signal.SIGKILL)  # the script only, not its group
    run.finish()
    run.require_nothing_left()


def case_interrupt(run):
    run.env["QREPACK_HTTP_RETRIES"] = "1"
    run.start()
    run.wait_serving()
    os.killpg(run.proc.pid, signal.SIGINT)
    rc, out = run.finish()
    check(rc != 0, "an interrupted demo-hub.sh exited 0")
    run.require_nothing_left()


def case_wrapper_kill(run):
    # The demo's conversions then meet a dead hub: one attempt each, not the default retries.
    run.env["QREPACK_HTTP_RETRIES"] = "1"
    run.start()
    wrapper = run.wait_serving()
    os.kill(wrapper, signal.SIGKILL)  # no cleanup can run in it: nginx must die by itself
    run.finish()
    # The wrapper's tree stays inside the demo's work tree (demo.sh removes that); no process.
    run.require_nothing_left(allow_in_work=True)


CASES = {"normal": case_normal, "script_kill": case_script_kill, "interrupt": case_interrupt,
         "wrapper_kill": case_wrapper_kill}


def main(argv):
    if argv == ["--list"]:
        print("\n".join(CASES))
        return 0
    if len(argv) != 2 or argv[1] not in CASES:
        print("usage: leftovers.py CLI_PATH CASE | --list\ncases: " + " ".join(CASES),
              file=sys.stderr)
        return 2
    run = Run(os.path.abspath(argv[0]), argv[1])
    try:
        run.prepare()
        CASES[argv[1]](run)
    except CaseFailure as e:
        print("%s FAILED: %s" % (argv[1], e), file=sys.stderr)
        return 1
    finally:
        run.cleanup()
    print("%s ok" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
