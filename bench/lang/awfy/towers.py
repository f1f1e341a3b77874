"""towers.py — Are We Fast Yet's Towers for CPython (the same program as
towers.nbl / towers.lua; README.md: the harness)."""
import sys

import awfy


class TowersDisk:
    def __init__(self, size):
        self.size = size
        self.next = None


class Towers:
    name = "Towers"

    def __init__(self):
        self._piles = None
        self._moves_done = 0

    def _push_disk(self, disk, pile):
        top = self._piles[pile]
        if top is not None and disk.size >= top.size:
            raise Exception("Cannot put a big disk on a smaller one")
        disk.next = top
        self._piles[pile] = disk

    def _pop_disk_from(self, pile):
        top = self._piles[pile]
        if top is None:
            raise Exception("Attempting to remove a disk from an empty pile")
        self._piles[pile] = top.next
        top.next = None
        return top

    def _move_top_disk(self, from_pile, to_pile):
        self._push_disk(self._pop_disk_from(from_pile), to_pile)
        self._moves_done += 1

    def _build_tower_at(self, pile, disks):
        for i in range(disks, -1, -1):
            self._push_disk(TowersDisk(i), pile)

    def _move_disks(self, disks, from_pile, to_pile):
        if disks == 1:
            self._move_top_disk(from_pile, to_pile)
        else:
            other_pile = (3 - from_pile) - to_pile
            self._move_disks(disks - 1, from_pile, other_pile)
            self._move_top_disk(from_pile, to_pile)
            self._move_disks(disks - 1, other_pile, to_pile)

    def benchmark(self):
        self._piles = [None, None, None]
        self._build_tower_at(0, 13)
        self._moves_done = 0
        self._move_disks(13, 0, 1)
        return self._moves_done

    def verify_result(self, result):
        return result == 8191

    def checksum(self, result):
        return result


if __name__ == "__main__":
    awfy.run(Towers(), sys.argv)
