"""storage.py — Are We Fast Yet's Storage for CPython (the same program as
storage.nbl / storage.lua; README.md: the harness)."""
import sys

import awfy


class Storage:
    name = "Storage"

    def __init__(self):
        self._count = 0

    def benchmark(self):
        random = awfy.Random()
        self._count = 0
        self._build_tree_depth(7, random)
        return self._count

    def _build_tree_depth(self, depth, random):
        self._count += 1
        if depth == 1:
            return [None] * (random.next() % 10 + 1)
        arr = [None] * 4
        for i in range(4):
            arr[i] = self._build_tree_depth(depth - 1, random)
        return arr

    def verify_result(self, result):
        return result == 5461

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Storage(), sys.argv)
