#!/usr/bin/env python3
"""Peak RSS and CPU seconds of a set of processes (stdlib only, Linux /proc).

usage: sampler.py OUT PID[,PID...] [--tree]

Every 0.25 s sums the RSS of the PIDs (with --tree: and all their descendants)
and keeps the maximum; the file-backed pages of processes that run one
executable (ferry and its guardian, the ferry processes of the task workload)
count once, as the largest of them (they are the same pages of the page
cache: the binary's text); anonymous memory counts for every process; CPU = for each process sampled, (utime+stime) at its
last sample minus at the first sample of the run (a descendant that appears
later counts from 0). Stops when every PID has exited or on SIGTERM, then
writes "peak_MiB cpu_s" to OUT. A process that exits between samples loses at
most 0.25 s of CPU.
"""
import os
import signal
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
TCK = os.sysconf("SC_CLK_TCK")
stop = False


def on_term(*_):
    global stop
    stop = True


def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    return s[s.rindex(")") + 2:].split()  # fields from 3 (state) on


def children(pid):
    out = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def rss(pid):
    """(anonymous, file-backed + shmem) resident bytes and the executable."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            v = f.read().split()
        exe = os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return 0, 0, ""
    res, shared = int(v[1]) * PAGE, int(v[2]) * PAGE
    return res - shared, shared, exe


def main():
    out, roots, tree = sys.argv[1], [int(p) for p in sys.argv[2].split(",") if p], "--tree" in sys.argv
    signal.signal(signal.SIGTERM, on_term)
    first, last, peak, started = {}, {}, 0, False
    while not stop:
        pids, frontier = [], [r for r in roots if os.path.exists("/proc/%d" % r)]
        if not frontier:
            break
        pids += frontier
        while tree and frontier:
            frontier = [c for p in frontier for c in children(p)]
            pids += frontier
        anon, files = 0, {}
        for p in pids:
            try:
                f = stat_fields(p)
            except OSError:
                continue
            ticks = int(f[11]) + int(f[12])
            first.setdefault(p, ticks if not started else 0)
            last[p] = ticks
            a, sh, exe = rss(p)
            anon += a
            files[exe] = max(files.get(exe, 0), sh)
        total = anon + sum(files.values())
        started = True
        peak = max(peak, total)
        time.sleep(0.25)
    cpu = sum(last[r] - first[r] for r in first) / TCK
    with open(out, "w") as f:
        f.write("%.0f %.2f\n" % (peak / 1048576, cpu))


if __name__ == "__main__":
    main()
