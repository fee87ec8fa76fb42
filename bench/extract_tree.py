#!/usr/bin/env python3
"""Builds the snapshot-like tree for bench/extract.sh.

usage: extract_tree.py ROOT LARGE MEDIUM SMALL SMALL_MAX_KIB [SMALL_MIN_KIB]
LARGE x 64 MiB, MEDIUM x 128 KiB, SMALL x SMALL_MIN_KIB..SMALL_MAX_KIB KiB (SMALL_MIN_KIB
defaults to 1; 0 makes empty files too); each file is half random bytes and half zeros, so zstd
roughly halves the tree. Deterministic sizes (seed 1).
"""
import os
import random
import sys

root, n_large, n_med, n_small, small_max = sys.argv[1], *map(int, sys.argv[2:6])
small_min = int(sys.argv[6]) if len(sys.argv) > 6 else 1
random.seed(1)


def write(path, size):
    half = size // 2
    with open(path, "wb") as f:
        f.write(os.urandom(half))
        f.write(bytes(size - half))


os.makedirs(f"{root}/snapshots", exist_ok=True)
for i in range(n_large):
    write(f"{root}/snapshots/slot-{i:03}.bin", 64 << 20)
for i in range(n_med):
    d = f"{root}/accounts/m{i // 1000:03}"
    os.makedirs(d, exist_ok=True)
    write(f"{d}/{i:07}", 128 << 10)
for i in range(n_small):
    d = f"{root}/accounts/s{i // 1000:03}"
    os.makedirs(d, exist_ok=True)
    write(f"{d}/{i:07}", random.randint(small_min, small_max) << 10)
