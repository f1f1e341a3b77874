"""list.py — Are We Fast Yet's List for CPython (the same program as list.nbl
/ list.lua; README.md: the harness)."""
import sys

import awfy


class Element:
    def __init__(self, v):
        self.val = v
        self.next = None

    def length(self):
        if self.next is None:
            return 1
        return 1 + self.next.length()


class List:
    name = "List"

    def benchmark(self):
        result = self.tail(self.make_list(15), self.make_list(10), self.make_list(6))
        return result.length()

    def make_list(self, length):
        if length == 0:
            return None
        e = Element(length)
        e.next = self.make_list(length - 1)
        return e

    @staticmethod
    def is_shorter_than(x, y):
        x_tail = x
        y_tail = y
        while y_tail is not None:
            if x_tail is None:
                return True
            x_tail = x_tail.next
            y_tail = y_tail.next
        return False

    def tail(self, x, y, z):
        if self.is_shorter_than(y, x):
            return self.tail(
                self.tail(x.next, y, z),
                self.tail(y.next, z, x),
                self.tail(z.next, x, y),
            )
        return z

    def verify_result(self, result):
        return result == 10

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(List(), sys.argv)
