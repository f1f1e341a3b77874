"""bounce.py — Are We Fast Yet's Bounce for CPython (the same program as
bounce.nbl / bounce.lua; README.md: the harness)."""
import sys

import awfy


class Ball:
    def __init__(self, random):
        self.x = random.next() % 500
        self.y = random.next() % 500
        self.x_vel = (random.next() % 300) - 150
        self.y_vel = (random.next() % 300) - 150

    def bounce(self):
        x_limit = 500
        y_limit = 500
        bounced = False
        self.x += self.x_vel
        self.y += self.y_vel
        if self.x > x_limit:
            self.x = x_limit
            self.x_vel = -abs(self.x_vel)
            bounced = True
        if self.x < 0:
            self.x = 0
            self.x_vel = abs(self.x_vel)
            bounced = True
        if self.y > y_limit:
            self.y = y_limit
            self.y_vel = -abs(self.y_vel)
            bounced = True
        if self.y < 0:
            self.y = 0
            self.y_vel = abs(self.y_vel)
            bounced = True
        return bounced


class Bounce:
    name = "Bounce"

    def benchmark(self):
        random = awfy.Random()
        ball_count = 100
        bounces = 0
        balls = [Ball(random) for _ in range(ball_count)]
        for _ in range(50):
            for ball in balls:
                if ball.bounce():
                    bounces += 1
        return bounces

    def verify_result(self, result):
        return result == 1331

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Bounce(), sys.argv)
