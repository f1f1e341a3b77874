"""queens.py — Are We Fast Yet's Queens for CPython (the same program as
queens.nbl / queens.lua; README.md: the harness)."""
import sys

import awfy


class Queens:
    name = "Queens"

    def __init__(self):
        self._free_maxs = None
        self._free_rows = None
        self._free_mins = None
        self._queen_rows = None

    def benchmark(self):
        result = True
        for _ in range(10):
            result = result and self.queens()
        return result

    def queens(self):
        self._free_rows = [True] * 8
        self._free_maxs = [True] * 16
        self._free_mins = [True] * 16
        self._queen_rows = [-1] * 8
        return self.place_queen(0)

    def place_queen(self, c):
        for r in range(8):
            if self.get_row_column(r, c):
                self._queen_rows[r] = c
                self.set_row_column(r, c, False)
                if c == 7:
                    return True
                if self.place_queen(c + 1):
                    return True
                self.set_row_column(r, c, True)
        return False

    def get_row_column(self, r, c):
        return self._free_rows[r] and self._free_maxs[c + r] and self._free_mins[c - r + 7]

    def set_row_column(self, r, c, v):
        self._free_rows[r] = v
        self._free_maxs[c + r] = v
        self._free_mins[c - r + 7] = v

    def verify_result(self, result):
        return result

    def checksum(self, result):
        # The boards are solved ten times over: the checksum is whether all were.
        return 1 if result else 0


if __name__ == "__main__":
    awfy.run(Queens(), sys.argv)
