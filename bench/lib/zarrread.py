#!/usr/bin/env python3
"""A Zarr-shaped reader (no zarr package): reads STORE/.zarray, derives the
chunk keys from the shape and chunk shape ("r.c" for a 2-D array, as Zarr
v2 names them), and reads every chunk file whole in key order (sorted as
strings, the order a store lists them), as a reader scanning the array
does. Prints the bytes read.

usage: zarrread.py STORE
"""
import itertools
import json
import os
import sys


def main(store):
    with open(os.path.join(store, ".zarray")) as f:
        meta = json.load(f)
    grid = [(s + c - 1) // c for s, c in zip(meta["shape"], meta["chunks"])]
    keys = sorted(".".join(map(str, idx)) for idx in itertools.product(*map(range, grid)))
    n = 0
    for k in keys:
        with open(os.path.join(store, k), "rb") as f:
            n += len(f.read())
    print(n)


if __name__ == "__main__":
    main(sys.argv[1])
