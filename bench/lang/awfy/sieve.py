"""sieve.py — Are We Fast Yet's Sieve for CPython (the same program as
sieve.nbl / sieve.lua; README.md: the harness)."""
import sys

import awfy


class Sieve:
    name = "Sieve"

    def benchmark(self):
        flags = [True] * 5000
        return self._sieve(flags, 5000)

    @staticmethod
    def _sieve(flags, size):
        prime_count = 0
        for i in range(2, size + 1):
            if flags[i - 1]:
                prime_count += 1
                k = i + i
                while k <= size:
                    flags[k - 1] = False
                    k += i
        return prime_count

    def verify_result(self, result):
        return result == 669

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Sieve(), sys.argv)
