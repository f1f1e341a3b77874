"""mandelbrot.py — Are We Fast Yet's Mandelbrot for CPython (the same program
as mandelbrot.nbl / mandelbrot.lua; README.md: the harness)."""
import sys

import awfy


def mandelbrot(size):
    total = 0
    byte_acc = 0
    bit_num = 0
    y = 0
    while y < size:
        ci = (2.0 * y / size) - 1.0
        x = 0
        while x < size:
            zrzr = 0.0
            zi = 0.0
            zizi = 0.0
            cr = (2.0 * x / size) - 1.5
            z = 0
            not_done = True
            escape = 0
            while not_done and z < 50:
                zr = zrzr - zizi + cr
                zi = 2.0 * zr * zi + ci
                # preserve recalculation
                zrzr = zr * zr
                zizi = zi * zi
                if zrzr + zizi > 4.0:
                    not_done = False
                    escape = 1
                z += 1
            byte_acc = (byte_acc << 1) + escape
            bit_num += 1
            if bit_num == 8:
                total ^= byte_acc
                byte_acc = 0
                bit_num = 0
            elif x == size - 1:
                byte_acc <<= 8 - bit_num
                total ^= byte_acc
                byte_acc = 0
                bit_num = 0
            x += 1
        y += 1
    return total


class Mandelbrot:
    name = "Mandelbrot"

    def inner_benchmark(self, inner):
        return mandelbrot(inner)

    def verify_inner(self, result, inner):
        if inner == 500:
            return result == 191
        if inner == 750:
            return result == 50
        if inner == 1:
            return result == 128
        print(f"No verification result for {inner} found")
        print(f"Result is: {result}")
        return False

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Mandelbrot(), sys.argv)
