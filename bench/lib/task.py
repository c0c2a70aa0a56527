#!/usr/bin/env python3
"""One task of the task workload (stdlib only).

Reads the shared reference sequentially (1 MiB reads), then RANDOM 4 KiB reads
at random offsets (seeded), computes (SHA-256 over an in-memory 1 MiB buffer,
COMPUTE_MIB times: fixed CPU work), and writes its output by copying SRC to OUT.
With --compute-only it does the compute step alone: the reference time for
data-handling efficiency = compute-only wall / real wall. With TASK_READ_DONE
set to a directory, it creates a file named after its seed there when its
reads are done (the harness's page-cache measurement). With TASK_TIMES set to a
directory, it writes there a file named after its seed with the wall-clock
times (epoch seconds) of its start and of the ends of its read, compute and
write phases (the harness's per-phase figures).

usage: task.py --seed N --compute-mib N [--compute-only] [--ref REF --src SRC --out OUT]
"""
import argparse
import hashlib
import os
import random
import time

RANDOM_READS = 2000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref")
    ap.add_argument("--src")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compute-mib", type=int, default=1000)
    ap.add_argument("--compute-only", action="store_true")
    a = ap.parse_args()
    marks = [time.time()]
    if not a.compute_only:
        with open(a.ref, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
            size = os.fstat(f.fileno()).st_size
            rnd = random.Random(a.seed)
            for _ in range(RANDOM_READS):
                os.pread(f.fileno(), 4096, rnd.randrange(0, size - 4096) & ~4095)
        if os.environ.get("TASK_READ_DONE"):
            # the harness measures the page cache when every task is here
            open(os.path.join(os.environ["TASK_READ_DONE"], str(a.seed)), "w").close()
    marks.append(time.time())
    buf = bytes(1 << 20)
    for i in range(a.compute_mib):
        hashlib.sha256(buf + i.to_bytes(8, "little")).digest()
    marks.append(time.time())
    if not a.compute_only:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        with open(a.src, "rb") as s, open(a.out, "wb") as o:
            while True:
                b = s.read(1 << 20)
                if not b:
                    break
                o.write(b)
    marks.append(time.time())
    if os.environ.get("TASK_TIMES"):
        with open(os.path.join(os.environ["TASK_TIMES"], str(a.seed)), "w") as t:
            t.write(" ".join("%.3f" % m for m in marks) + "\n")


if __name__ == "__main__":
    main()
