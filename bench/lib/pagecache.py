#!/usr/bin/env python3
"""Page-cache growth of the task workload's read phase (stdlib + fincore).

usage: pagecache.py DONE_DIR TASKS MINIO_REF_DIR REF_BYTES OUT [TIMEOUT_S]

Notes Cached (/proc/meminfo) and the pages MinIO's own files of the reference
hold (fincore over MINIO_REF_DIR), waits until DONE_DIR holds TASKS files
(task.py makes one when its reads are done), then writes to OUT the growth of
Cached less the growth of MinIO's pages, divided by REF_BYTES: 1.0 means the
clients together kept one copy of the reference in the page cache, N tasks
each with their own copy give about N. Writes "timeout" when the tasks do not
all get there.
"""
import os
import subprocess
import sys
import time


def cached():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) * 1024
    return 0


def minio_pages(d):
    files = [os.path.join(r, n) for r, _, ns in os.walk(d) for n in ns]
    if not files:
        return 0
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES"] + files,
                         capture_output=True, text=True).stdout
    return sum(int(x) for x in out.split() if x.isdigit())


def main():
    done, tasks, mdir, ref, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 900
    c0, m0 = cached(), minio_pages(mdir)
    t0 = time.time()
    while len(os.listdir(done)) < tasks:
        if time.time() - t0 > timeout:
            open(out, "w").write("timeout")
            return
        time.sleep(0.1)
    c1, m1 = cached(), minio_pages(mdir)
    open(out, "w").write("%.2f" % (((c1 - c0) - (m1 - m0)) / ref))


if __name__ == "__main__":
    main()
