#!/usr/bin/env python3
"""One task of the staged-input workload (stdlib only).

Reads its inputs one after the other, each whole in 1 MiB reads (an input's
index "<input>.bai", when present, first and whole), and works on each input
after reading it: SHA-256 over a 1 MiB buffer COMPUTE_X times per MiB read
(a tool that loads an input, then computes on it). Then it writes OUT by
copying SRC. With --compute-only it does the compute steps alone, for
inputs of the given sizes in MiB (the reference for "all I/O free").
Phase times go to stderr (the task's .command.err and ferry's log).

usage: stagetask.py --compute-x N --inputs A B C --src SRC --out OUT
       stagetask.py --compute-x N --compute-only --mib 256 512 1024
"""
import argparse
import hashlib
import os
import sys
import time


def compute(mib, x):
    buf = bytes(1 << 20)
    for i in range(mib * x):
        hashlib.sha256(buf + i.to_bytes(8, "little")).digest()


def read_whole(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", nargs="*", default=[])
    ap.add_argument("--mib", nargs="*", type=int, default=[])
    ap.add_argument("--compute-x", type=int, default=3)
    ap.add_argument("--compute-only", action="store_true")
    ap.add_argument("--src")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.compute_only:
        for m in a.mib:
            compute(m, a.compute_x)
        return
    t = time.monotonic()
    print("stagetask: started at %.3f" % time.time(), file=sys.stderr)
    for p in a.inputs:
        if os.path.exists(p + ".bai"):
            read_whole(p + ".bai")
        n = read_whole(p)
        t1 = time.monotonic()
        compute(n >> 20, a.compute_x)
        t2 = time.monotonic()
        print("stagetask: %s read %.2f s, compute %.2f s" % (p, t1 - t, t2 - t1), file=sys.stderr)
        t = t2
    with open(a.src, "rb") as s, open(a.out, "wb") as o:
        while True:
            b = s.read(1 << 20)
            if not b:
                break
            o.write(b)
    print("stagetask: output written in %.2f s, done at %.3f" % (time.monotonic() - t, time.time()), file=sys.stderr)


if __name__ == "__main__":
    main()
