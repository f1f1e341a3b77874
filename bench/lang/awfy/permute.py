"""permute.py — Are We Fast Yet's Permute for CPython (the same program as
permute.nbl / permute.lua; README.md: the harness)."""
import sys

import awfy


class Permute:
    name = "Permute"

    def __init__(self):
        self._count = 0
        self._v = None

    def benchmark(self):
        self._count = 0
        self._v = [0] * 6
        self._permute(6)
        return self._count

    def _permute(self, n):
        self._count += 1
        if n != 0:
            n1 = n - 1
            self._permute(n1)
            for i in range(n1, -1, -1):
                self._swap(n1, i)
                self._permute(n1)
                self._swap(n1, i)

    def _swap(self, i, j):
        tmp = self._v[i]
        self._v[i] = self._v[j]
        self._v[j] = tmp

    def verify_result(self, result):
        return result == 8660

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Permute(), sys.argv)
