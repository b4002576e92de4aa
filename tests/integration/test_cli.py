#!/usr/bin/python3
"""Integration test of the command line (contract v3, "Command line"): an unknown option, a
bad value or an argument too many is one line and exit 2, nothing mounted; --check of several
sources checks each and exits with the worst status; -o logfile; and the options of --help
(printed from the one table of options) are exactly those of the README's table and the man
page's OPTIONS."""

import os
import re
import stat
import time

import harness
import models
from harness import check, eq, mounted, run, run_tbmfs

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def help_options():
    rc, out, _ = run_tbmfs(["--help"])
    eq(rc, 0, "--help exit")
    names = set()
    for line in out.splitlines():
        m = re.match(r"^    (-o ([a-z_0-9]+)|--?[a-zA-Z]+)\b", line)
        if m:
            names.add(m.group(2) or m.group(1))
    return names


def option_names(cells):
    """Option names of backticked items: '-o uid=N' -> 'uid', '--check' -> '--check'."""
    names = set()
    for item in cells:
        m = re.match(r"^-o ([a-z_0-9]+)", item)
        if m:
            names.add(m.group(1))
        elif re.match(r"^--?[a-zA-Z]+$", item):
            names.add(item)
    return names


def readme_options():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    usage = text[text.index("## Usage"):]
    usage = usage[:usage.index("\n## ", 4)]
    cells = []
    for line in usage.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            cells += [c.split(" (")[0] for c in re.findall(r"`([^`]+)`", first)]
    return option_names(cells)


def man_options():
    """The options of the tags (.B, .BI, .BR lines after .TP) of the man page's OPTIONS."""
    text = open(os.path.join(ROOT, "docs", "tbmfs.1"), encoding="utf-8").read()
    lines = text[text.index(".SH OPTIONS"):text.index(".SH ENVIRONMENT")].splitlines()
    cells = []
    for prev, line in zip(lines, lines[1:]):
        if prev == ".TP" and re.match(r"^\.B[IR]? ", line):
            body = line.split(" ", 1)[1].replace("\\-", "-").replace('"', "")
            cells += re.findall(r"(?:^|[ ,])(-o [a-z_0-9]+|--?[a-zA-Z]+)", body)
    return option_names(cells)


def refusals(suite, src):
    mnt = os.path.join(suite.tmp, "never")
    os.makedirs(mnt, exist_ok=True)
    cases = [
        ("an unknown -o option", ["-o", "bogus", src, mnt], "bogus"),
        ("an unknown -o option among known ones", ["-o", "ro,bogus=1", src, mnt], "bogus"),
        ("an unknown dash option", ["--bogus", src, mnt], "--bogus"),
        ("a bad value", ["-o", "selftest_batch=0", src, mnt], "selftest_batch=0"),
        ("a value for a flag", ["-o", "strict=yes", src, mnt], "strict=yes"),
        ("a flag without its value", ["-o", "max_read", src, mnt], "max_read"),
        ("a bad max_threads", ["-o", "max_threads=many", src, mnt], "max_threads=many"),
        ("an argument too many", [src, mnt, "extra"], "extra"),
        ("--check with an unknown option", ["--check", "-o", "bogus", src], "bogus"),
        ("--check with a bad value", ["--check", "-o", "cache_size=1", src], "cache_size=1"),
    ]
    for what, args, named in cases:
        def go(args=args, named=named):
            rc, out, err = run_tbmfs(args)
            eq(rc, 2, "exit (stderr %r)" % err)
            lines = err.strip().splitlines()
            eq(len(lines), 1, "lines on stderr: %r" % lines)
            check(named in lines[0], "the line %r does not name %r" % (lines[0], named))
            eq(out, "", "stdout")
            check(not mounted(mnt), "mounted anyway")
        suite.case("refused, exit 2: " + what, go)


def checks(suite, good, broken):
    def several():
        rc, out, _ = run_tbmfs(["--check", good, broken])
        eq(rc, 1, "exit of good + problems")
        check(re.search(r"^%s: .*0 with problems" % re.escape(good), out, re.M),
              "no summary of the first source: %r" % out)
        check(re.search(r"^%s: .*1 with problems" % re.escape(broken), out, re.M),
              "no summary of the second source: %r" % out[-400:])
        rc, _, err = run_tbmfs(["--check", broken, "/nonexistent.tbm", good])
        eq(rc, 2, "exit with an unusable source among them")
        check("/nonexistent.tbm" in err, "the unusable one is not named: %r" % err)
        rc, _, _ = run_tbmfs(["--check", good, good])
        eq(rc, 0, "exit of two good ones")
        rc, _, _ = run_tbmfs([good, "--check", broken])
        eq(rc, 1, "--check after the sources")

    suite.case("--check SOURCE...: every source checked, the worst status", several)


def logfile(suite, good):
    log = os.path.join(suite.tmp, "logs", "tbmfs.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)

    def go():
        m = harness.Mount(suite, good, ["-o", "logfile=" + log, "-o", "max_read=4096"],
                          foreground=True)
        rc = m.start()
        check(rc is None and mounted(m.path), "not mounted: %s %r" % (rc, m.err))
        # a view of a tensor broken on purpose fails with EIO and is logged
        broken = ["model.embed.weight"]
        harness.expect_eio(m.p("tensors", broken[0], "dense.f32"), "dense.f32")
        m.stop()
        st = os.stat(log)
        eq(stat.S_IMODE(st.st_mode), 0o600, "mode of the new log file")
        lines = open(log, encoding="utf-8").read().splitlines()
        check(lines, "nothing logged")
        for line in lines:
            check(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \S", line), "line %r" % line)
        check(any(broken[0] in x and "dense.f32" in x for x in lines),
              "no line names the tensor and the view: %r" % lines)
        check("dense.f32" not in m.err, "the line went to stderr too: %r" % m.err)
        before = len(lines)
        # appended, not truncated, by the next run
        run_tbmfs(["-o", "logfile=" + log, "--check", "/nonexistent.tbm"])
        lines = open(log, encoding="utf-8").read().splitlines()
        eq(len(lines), before + 1, "lines after a second run")
        check("/nonexistent.tbm" in lines[-1], "last line %r" % lines[-1])

    suite.case("-o logfile=PATH: every message there, 0600, UTC-stamped, appended", go)


def dead_mount(suite, good):
    def go():
        m = harness.Mount(suite, good)
        try:
            eq(m.start(), 0, "first mount")
            m.kill()
            m.wait_exit(10)
            deadline = time.monotonic() + 5
            # statfs asks the daemon; stat may be answered from the kernel's cache
            while harness.errno_of(os.statvfs, m.path) == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            eq(harness.ename(harness.errno_of(os.statvfs, m.path)), "ENOTCONN", "dead mount")
            rc, _, err = run_tbmfs([good, m.path])
            eq(rc, 1, "exit of a mount over the dead one (%r)" % err)
            check("unmount it first" in err and m.path in err, "the line: %r" % err)
            eq(len(open("/proc/self/mounts").read().split(" " + m.path + " ")), 2,
               "mounts at the mount point")
        finally:
            m.stop()

    suite.case("a dead mount point is refused: unmount it first", go)


def main(suite):
    gen = harness.load_gen()
    good = os.path.join(suite.tmp, "good.tbm")
    models.write_container(gen, good, models.sound_tensors(gen))
    broken = os.path.join(suite.tmp, "broken.tbm")
    models.write_container(gen, broken, models.sound_tensors(gen))
    with open(broken, "r+b") as f:  # tensor 0's magic spoiled: a problem, the rest sound
        f.seek(0)
        f.write(b"XXXX")
    refusals(suite, good)
    checks(suite, good, broken)

    def docs():
        table = help_options()
        check(len(table) > 10, "too few options in --help: %r" % table)
        eq(sorted(readme_options()), sorted(table), "README's options against --help")
        eq(sorted(man_options()), sorted(table), "the man page's options against --help")

    suite.case("README, man page and --help name the same options", docs)
    logfile(suite, broken)
    dead_mount(suite, good)


if __name__ == "__main__":
    run("integration-cli", main)
