-- towers.lua — Are We Fast Yet's Towers for Lua 5.4 (the same program as
-- towers.nbl / towers.py; README.md: the harness).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local bench = {name = "Towers"}

local function create_disk(size)
  return {size = size, next = nil}
end

function bench:benchmark()
  self.piles = {}
  self:build_tower_at(1, 13)
  self.moves_done = 0
  self:move_disks(13, 1, 2)
  return self.moves_done
end

function bench:push_disk(disk, pile)
  local top = self.piles[pile]
  if top and disk.size >= top.size then
    error("Cannot put a big disk on a smaller one")
  end
  disk.next = top
  self.piles[pile] = disk
end

function bench:pop_disk_from(pile)
  local top = self.piles[pile]
  assert(top, "Attempting to remove a disk from an empty pile")
  self.piles[pile] = top.next
  top.next = nil
  return top
end

function bench:move_top_disk(from_pile, to_pile)
  self:push_disk(self:pop_disk_from(from_pile), to_pile)
  self.moves_done = self.moves_done + 1
end

-- disks..0 as in the suite's Java and Python versions (its Lua one stops at 1):
-- the same 14 disks in all three languages here.
function bench:build_tower_at(pile, disks)
  for i = disks, 0, -1 do
    self:push_disk(create_disk(i), pile)
  end
end

function bench:move_disks(disks, from_pile, to_pile)
  if disks == 1 then
    self:move_top_disk(from_pile, to_pile)
  else
    local other_pile = 6 - from_pile - to_pile
    self:move_disks(disks - 1, from_pile, other_pile)
    self:move_top_disk(from_pile, to_pile)
    self:move_disks(disks - 1, other_pile, to_pile)
  end
end

function bench:verify_result(result)
  return result == 8191
end

function bench:checksum(result)
  return result
end

awfy.run(bench, arg)
