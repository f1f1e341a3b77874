"""nbody.py — Are We Fast Yet's NBody for CPython (the same program as
nbody.nbl / nbody.lua; README.md: the harness)."""
import sys
from math import sqrt

import awfy

PI = 3.141592653589793
SOLAR_MASS = 4.0 * PI * PI
DAYS_PER_YEAR = 365.24


class Body:
    def __init__(self, x, y, z, vx, vy, vz, mass):
        self.x = x
        self.y = y
        self.z = z
        self.vx = vx * DAYS_PER_YEAR
        self.vy = vy * DAYS_PER_YEAR
        self.vz = vz * DAYS_PER_YEAR
        self.mass = mass * SOLAR_MASS

    def offset_momentum(self, px, py, pz):
        self.vx = 0.0 - (px / SOLAR_MASS)
        self.vy = 0.0 - (py / SOLAR_MASS)
        self.vz = 0.0 - (pz / SOLAR_MASS)


def jupiter():
    return Body(4.8414314424647209, -1.16032004402742839, -0.103622044471123109,
                0.00166007664274403694, 0.00769901118419740425, -0.0000690460016972063023,
                0.000954791938424326609)


def saturn():
    return Body(8.34336671824457987, 4.12479856412430479, -0.403523417114321381,
                -0.00276742510726862411, 0.00499852801234917238, 0.0000230417297573763929,
                0.000285885980666130812)


def uranus():
    return Body(12.894369562139131, -15.1111514016986312, -0.223307578892655734,
                0.00296460137564761618, 0.0023784717395948095, -0.0000296589568540237556,
                0.0000436624404335156298)


def neptune():
    return Body(15.3796971148509165, -25.9193146099879641, 0.179258772950371181,
                0.00268067772490389322, 0.00162824170038242295, -0.000095159225451971587,
                0.0000515138902046611451)


def sun():
    return Body(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


class NBodySystem:
    def __init__(self):
        bodies = [sun(), jupiter(), saturn(), uranus(), neptune()]
        px = 0.0
        py = 0.0
        pz = 0.0
        for b in bodies:
            px += b.vx * b.mass
            py += b.vy * b.mass
            pz += b.vz * b.mass
        bodies[0].offset_momentum(px, py, pz)
        self.bodies = bodies

    def advance(self, dt):
        bodies = self.bodies
        for i in range(len(bodies)):
            i_body = bodies[i]
            for j in range(i + 1, len(bodies)):
                j_body = bodies[j]
                dx = i_body.x - j_body.x
                dy = i_body.y - j_body.y
                dz = i_body.z - j_body.z

                d_squared = dx * dx + dy * dy + dz * dz
                distance = sqrt(d_squared)
                mag = dt / (d_squared * distance)

                i_body.vx = i_body.vx - dx * j_body.mass * mag
                i_body.vy = i_body.vy - dy * j_body.mass * mag
                i_body.vz = i_body.vz - dz * j_body.mass * mag

                j_body.vx = j_body.vx + dx * i_body.mass * mag
                j_body.vy = j_body.vy + dy * i_body.mass * mag
                j_body.vz = j_body.vz + dz * i_body.mass * mag
        for body in bodies:
            body.x = body.x + dt * body.vx
            body.y = body.y + dt * body.vy
            body.z = body.z + dt * body.vz

    def energy(self):
        bodies = self.bodies
        e = 0.0
        for i in range(len(bodies)):
            i_body = bodies[i]
            e += 0.5 * i_body.mass * (i_body.vx * i_body.vx + i_body.vy * i_body.vy
                                      + i_body.vz * i_body.vz)
            for j in range(i + 1, len(bodies)):
                j_body = bodies[j]
                dx = i_body.x - j_body.x
                dy = i_body.y - j_body.y
                dz = i_body.z - j_body.z
                distance = sqrt(dx * dx + dy * dy + dz * dz)
                e -= (i_body.mass * j_body.mass) / distance
        return e


class NBody:
    name = "NBody"

    def inner_benchmark(self, inner):
        system = NBodySystem()
        for _ in range(inner):
            system.advance(0.01)
        return system.energy()

    def verify_inner(self, result, inner):
        if inner == 250000:
            return result == -0.1690859889909308
        if inner == 1:
            return result == -0.16907495402506745
        print(f"No verification result for {inner} found")
        print(f"Result is: {result:.17g}")
        return False

    def checksum(self, result):
        # All 17 significant digits: the three languages must agree to the last bit.
        return f"{result:.17g}"


if __name__ == "__main__":
    awfy.run(NBody(), sys.argv)
