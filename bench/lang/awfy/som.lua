-- som.lua — the Are We Fast Yet suite's own collection library (Vector,
-- Dictionary, IdentityDictionary) for Lua 5.4: the same code as som.nbl /
-- som.py, used by deltablue.lua and json.lua.  As in the suite, a Vector's
-- storage is a fixed-size array (with its size in `n`) copied into one twice
-- as long when full; indices are 1-based.
local som = {}

local INITIAL_SIZE = 10
local INITIAL_CAPACITY = 16

local function new_array(n)
  return {n = n}
end

local Vector = {}
Vector.__index = Vector
som.Vector = Vector

function Vector.new(size)
  local storage = nil
  if size and size > 0 then
    storage = new_array(size)
  end
  return setmetatable({storage = storage, first_idx = 1, last_idx = 1}, Vector)
end

function Vector.with(elem)
  local v = Vector.new(1)
  v:append(elem)
  return v
end

function Vector:at(idx)
  if self.storage == nil or idx > self.storage.n then
    return nil
  end
  return self.storage[idx]
end

function Vector:at_put(idx, val)
  if self.storage == nil then
    self.storage = new_array(math.max(idx, INITIAL_SIZE))
  elseif idx > self.storage.n then
    local new_length = self.storage.n
    while new_length < idx do
      new_length = new_length * 2
    end
    local new_storage = new_array(new_length)
    for i = 1, self.storage.n do
      new_storage[i] = self.storage[i]
    end
    self.storage = new_storage
  end
  self.storage[idx] = val
  if self.last_idx < idx + 1 then
    self.last_idx = idx + 1
  end
end

function Vector:append(elem)
  if self.storage == nil then
    self.storage = new_array(INITIAL_SIZE)
  elseif self.last_idx > self.storage.n then
    -- full: copy into storage twice as long
    local new_storage = new_array(2 * self.storage.n)
    for i = 1, self.storage.n do
      new_storage[i] = self.storage[i]
    end
    self.storage = new_storage
  end
  self.storage[self.last_idx] = elem
  self.last_idx = self.last_idx + 1
end

function Vector:is_empty()
  return self.last_idx == self.first_idx
end

function Vector:for_each(fn)
  for i = self.first_idx, self.last_idx - 1 do
    fn(self.storage[i])
  end
end

function Vector:has_some(fn)
  for i = self.first_idx, self.last_idx - 1 do
    if fn(self.storage[i]) then
      return true
    end
  end
  return false
end

function Vector:get_one(fn)
  for i = self.first_idx, self.last_idx - 1 do
    local e = self.storage[i]
    if fn(e) then
      return e
    end
  end
  return nil
end

function Vector:first()
  if self:is_empty() then
    return nil
  end
  return self.storage[self.first_idx]
end

function Vector:remove_first()
  if self:is_empty() then
    return nil
  end
  self.first_idx = self.first_idx + 1
  return self.storage[self.first_idx - 1]
end

-- Removes every element that is obj itself; whether there was one.
function Vector:remove(obj)
  if self.storage == nil or self:is_empty() then
    return false
  end
  local new_storage = new_array(self:capacity())
  local new_last = 1
  local found = false
  self:for_each(function(it)
    if it == obj then
      found = true
    else
      new_storage[new_last] = it
      new_last = new_last + 1
    end
  end)
  self.storage = new_storage
  self.last_idx = new_last
  self.first_idx = 1
  return found
end

function Vector:remove_all()
  self.first_idx = 1
  self.last_idx = 1
  if self.storage ~= nil then
    self.storage = new_array(self.storage.n)
  end
end

function Vector:size()
  return self.last_idx - self.first_idx
end

function Vector:capacity()
  if self.storage == nil then
    return 0
  end
  return self.storage.n
end

-- Sorts in place; compare(a, b) > 0 when a goes after b.
function Vector:sort(compare)
  if self:size() > 0 then
    self:sort_range(self.first_idx, self.last_idx - 1, compare)
  end
end

local function swap(storage, i, j)
  local tmp = storage[i]
  storage[i] = storage[j]
  storage[j] = tmp
end

-- The suite's quicksort of storage[i..j] (median of three).
function Vector:sort_range(i, j, c)
  local n = j + 1 - i
  if n <= 1 then
    return
  end
  local storage = self.storage
  local di = storage[i]
  local dj = storage[j]
  if c(di, dj) > 0 then
    swap(storage, i, j)
    di, dj = dj, di
  end
  if n > 2 then
    local ij = (i + j) // 2
    local dij = storage[ij]
    if c(di, dij) <= 0 then
      if c(dij, dj) > 0 then
        swap(storage, j, ij)
        dij = dj
      end
    else
      swap(storage, i, ij)
      dij = di
    end
    if n > 3 then
      local k = i
      local l = j - 1
      while true do
        while k <= l and c(dij, storage[l]) <= 0 do
          l = l - 1
        end
        k = k + 1
        while k <= l and c(storage[k], dij) <= 0 do
          k = k + 1
        end
        if k > l then
          break
        end
        swap(storage, k, l)
      end
      self:sort_range(i, l, c)
      self:sort_range(k, j, c)
    end
  end
end

-- Dictionary: chained buckets; a key has a custom_hash method (or is nil).
local function hash_of(key)
  if key == nil then
    return 0
  end
  local h = key:custom_hash()
  return h ~ (h >> 16)
end

local function new_entry(hash, key, value, next)
  return {hash = hash, key = key, value = value, next = next}
end

local Dictionary = {}
Dictionary.__index = Dictionary
som.Dictionary = Dictionary

function Dictionary.new(size)
  return setmetatable({buckets = new_array(size or INITIAL_CAPACITY), size = 0, identity = false}, Dictionary)
end

-- A Dictionary whose keys match only themselves.
function som.IdentityDictionary(size)
  local d = Dictionary.new(size)
  d.identity = true
  return d
end

-- Lua's == on tables is identity, so both kinds of dictionary compare keys
-- alike; the flag is kept for the structure the other languages have.
function Dictionary:entry_matches(e, hash, key)
  return e.hash == hash and e.key == key
end

function Dictionary:is_empty()
  return self.size == 0
end

function Dictionary:bucket_idx(hash)
  return ((self.buckets.n - 1) & hash) + 1
end

function Dictionary:at(key)
  local hash = hash_of(key)
  local e = self.buckets[self:bucket_idx(hash)]
  while e ~= nil do
    if self:entry_matches(e, hash, key) then
      return e.value
    end
    e = e.next
  end
  return nil
end

function Dictionary:contains_key(key)
  local hash = hash_of(key)
  local e = self.buckets[self:bucket_idx(hash)]
  while e ~= nil do
    if self:entry_matches(e, hash, key) then
      return true
    end
    e = e.next
  end
  return false
end

function Dictionary:at_put(key, value)
  local hash = hash_of(key)
  local i = self:bucket_idx(hash)
  local current = self.buckets[i]
  if current == nil then
    self.buckets[i] = new_entry(hash, key, value, nil)
    self.size = self.size + 1
  else
    self:insert_bucket_entry(key, value, hash, current)
  end
  if self.size > self.buckets.n then
    self:resize()
  end
end

function Dictionary:insert_bucket_entry(key, value, hash, head)
  local current = head
  while true do
    if self:entry_matches(current, hash, key) then
      current.value = value
      return
    end
    if current.next == nil then
      self.size = self.size + 1
      current.next = new_entry(hash, key, value, nil)
      return
    end
    current = current.next
  end
end

function Dictionary:resize()
  local old_storage = self.buckets
  self.buckets = new_array(old_storage.n * 2)
  self:transfer_entries(old_storage)
end

function Dictionary:transfer_entries(old_storage)
  for i = 1, old_storage.n do
    local current = old_storage[i]
    if current ~= nil then
      old_storage[i] = nil
      if current.next == nil then
        self.buckets[(current.hash & (self.buckets.n - 1)) + 1] = current
      else
        self:split_bucket(old_storage, i, current)
      end
    end
  end
end

-- Splits a chain between bucket i and bucket i + old size by the hash bit
-- that the doubled size adds.
function Dictionary:split_bucket(old_storage, i, head)
  local lo_head, lo_tail, hi_head, hi_tail = nil, nil, nil, nil
  local current = head
  while current ~= nil do
    if current.hash & old_storage.n == 0 then
      if lo_tail == nil then lo_head = current else lo_tail.next = current end
      lo_tail = current
    else
      if hi_tail == nil then hi_head = current else hi_tail.next = current end
      hi_tail = current
    end
    current = current.next
  end
  if lo_tail ~= nil then
    lo_tail.next = nil
    self.buckets[i] = lo_head
  end
  if hi_tail ~= nil then
    hi_tail.next = nil
    self.buckets[i + old_storage.n] = hi_head
  end
end

function Dictionary:remove_all()
  self.buckets = new_array(self.buckets.n)
  self.size = 0
end

function Dictionary:keys()
  local keys = Vector.new(self.size)
  for i = 1, self.buckets.n do
    local current = self.buckets[i]
    while current ~= nil do
      keys:append(current.key)
      current = current.next
    end
  end
  return keys
end

function Dictionary:values()
  local vals = Vector.new(self.size)
  for i = 1, self.buckets.n do
    local current = self.buckets[i]
    while current ~= nil do
      vals:append(current.value)
      current = current.next
    end
  end
  return vals
end

return som
