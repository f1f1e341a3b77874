"""som.py — the Are We Fast Yet suite's own collection library (Vector,
Dictionary, IdentityDictionary) for CPython: the same code as som.nbl /
som.lua, used by deltablue.py and json.py.  As in the suite, a Vector's
storage is a fixed-size list copied into one twice as long when full."""

INITIAL_SIZE = 10
INITIAL_CAPACITY = 16


class Vector:
    def __init__(self, size=0):
        self.storage = None if size == 0 else [None] * size
        self.first_idx = 0
        self.last_idx = 0

    @staticmethod
    def with_(elem):
        v = Vector(1)
        v.append(elem)
        return v

    def at(self, idx):
        if self.storage is None or idx >= len(self.storage):
            return None
        return self.storage[idx]

    def at_put(self, idx, val):
        if self.storage is None:
            self.storage = [None] * max(idx + 1, INITIAL_SIZE)
        elif idx >= len(self.storage):
            new_length = len(self.storage)
            while new_length <= idx:
                new_length *= 2
            new_storage = [None] * new_length
            for i in range(len(self.storage)):
                new_storage[i] = self.storage[i]
            self.storage = new_storage
        self.storage[idx] = val
        if self.last_idx < idx + 1:
            self.last_idx = idx + 1

    def append(self, elem):
        if self.storage is None:
            self.storage = [None] * INITIAL_SIZE
        elif self.last_idx >= len(self.storage):
            # full: copy into storage twice as long
            new_storage = [None] * (2 * len(self.storage))
            for i in range(len(self.storage)):
                new_storage[i] = self.storage[i]
            self.storage = new_storage
        self.storage[self.last_idx] = elem
        self.last_idx += 1

    def is_empty(self):
        return self.last_idx == self.first_idx

    def for_each(self, fn):
        for i in range(self.first_idx, self.last_idx):
            fn(self.storage[i])

    def has_some(self, fn):
        for i in range(self.first_idx, self.last_idx):
            if fn(self.storage[i]):
                return True
        return False

    def get_one(self, fn):
        for i in range(self.first_idx, self.last_idx):
            e = self.storage[i]
            if fn(e):
                return e
        return None

    def first(self):
        if self.is_empty():
            return None
        return self.storage[self.first_idx]

    def remove_first(self):
        if self.is_empty():
            return None
        self.first_idx += 1
        return self.storage[self.first_idx - 1]

    def remove(self, obj):
        """Removes every element that is obj itself; whether there was one."""
        if self.storage is None or self.is_empty():
            return False
        new_storage = [None] * self.capacity()
        new_last = 0
        found = False

        def each(it):
            nonlocal new_last, found
            if it is obj:
                found = True
            else:
                new_storage[new_last] = it
                new_last += 1

        self.for_each(each)
        self.storage = new_storage
        self.last_idx = new_last
        self.first_idx = 0
        return found

    def remove_all(self):
        self.first_idx = 0
        self.last_idx = 0
        if self.storage is not None:
            self.storage = [None] * len(self.storage)

    def size(self):
        return self.last_idx - self.first_idx

    def capacity(self):
        return 0 if self.storage is None else len(self.storage)

    def sort(self, compare):
        """Sorts in place; compare(a, b) > 0 when a goes after b."""
        if self.size() > 0:
            self.sort_range(self.first_idx, self.last_idx - 1, compare)

    def sort_range(self, i, j, c):
        """The suite's quicksort of storage[i..j] (median of three)."""
        n = j + 1 - i
        if n <= 1:
            return
        storage = self.storage
        di = storage[i]
        dj = storage[j]
        if c(di, dj) > 0:
            _swap(storage, i, j)
            di, dj = dj, di
        if n > 2:
            ij = (i + j) // 2
            dij = storage[ij]
            if c(di, dij) <= 0:
                if c(dij, dj) > 0:
                    _swap(storage, j, ij)
                    dij = dj
            else:
                _swap(storage, i, ij)
                dij = di
            if n > 3:
                k = i
                l = j - 1
                while True:
                    while k <= l and c(dij, storage[l]) <= 0:
                        l -= 1
                    k += 1
                    while k <= l and c(storage[k], dij) <= 0:
                        k += 1
                    if k > l:
                        break
                    _swap(storage, k, l)
                self.sort_range(i, l, c)
                self.sort_range(k, j, c)


def _swap(storage, i, j):
    storage[i], storage[j] = storage[j], storage[i]


def _hash(key):
    """A key has a custom_hash method (or is None)."""
    if key is None:
        return 0
    h = key.custom_hash()
    return h ^ (h >> 16)


class _Entry:
    def __init__(self, hash_, key, value, next_):
        self.hash = hash_
        self.key = key
        self.value = value
        self.next = next_


class Dictionary:
    """Chained buckets; keys match by equality (IdentityDictionary: identity)."""

    def __init__(self, size=INITIAL_CAPACITY):
        self.buckets = [None] * size
        self.size = 0
        self.identity = False

    def entry_matches(self, e, hash_, key):
        return e.hash == hash_ and (e.key is key if self.identity else e.key == key)

    def is_empty(self):
        return self.size == 0

    def bucket_idx(self, hash_):
        return (len(self.buckets) - 1) & hash_

    def at(self, key):
        hash_ = _hash(key)
        e = self.buckets[self.bucket_idx(hash_)]
        while e is not None:
            if self.entry_matches(e, hash_, key):
                return e.value
            e = e.next
        return None

    def contains_key(self, key):
        hash_ = _hash(key)
        e = self.buckets[self.bucket_idx(hash_)]
        while e is not None:
            if self.entry_matches(e, hash_, key):
                return True
            e = e.next
        return False

    def at_put(self, key, value):
        hash_ = _hash(key)
        i = self.bucket_idx(hash_)
        current = self.buckets[i]
        if current is None:
            self.buckets[i] = _Entry(hash_, key, value, None)
            self.size += 1
        else:
            self.insert_bucket_entry(key, value, hash_, current)
        if self.size > len(self.buckets):
            self.resize()

    def insert_bucket_entry(self, key, value, hash_, head):
        current = head
        while True:
            if self.entry_matches(current, hash_, key):
                current.value = value
                return
            if current.next is None:
                self.size += 1
                current.next = _Entry(hash_, key, value, None)
                return
            current = current.next

    def resize(self):
        old_storage = self.buckets
        self.buckets = [None] * (len(old_storage) * 2)
        self.transfer_entries(old_storage)

    def transfer_entries(self, old_storage):
        for i in range(len(old_storage)):  # pylint: disable=consider-using-enumerate
            current = old_storage[i]
            if current is not None:
                old_storage[i] = None
                if current.next is None:
                    self.buckets[current.hash & (len(self.buckets) - 1)] = current
                else:
                    self.split_bucket(old_storage, i, current)

    def split_bucket(self, old_storage, i, head):
        """Splits a chain between bucket i and bucket i + old size."""
        lo_head = lo_tail = hi_head = hi_tail = None
        current = head
        while current is not None:
            if current.hash & len(old_storage) == 0:
                if lo_tail is None:
                    lo_head = current
                else:
                    lo_tail.next = current
                lo_tail = current
            else:
                if hi_tail is None:
                    hi_head = current
                else:
                    hi_tail.next = current
                hi_tail = current
            current = current.next
        if lo_tail is not None:
            lo_tail.next = None
            self.buckets[i] = lo_head
        if hi_tail is not None:
            hi_tail.next = None
            self.buckets[i + len(old_storage)] = hi_head

    def remove_all(self):
        self.buckets = [None] * len(self.buckets)
        self.size = 0

    def keys(self):
        keys = Vector(self.size)
        for b in self.buckets:
            current = b
            while current is not None:
                keys.append(current.key)
                current = current.next
        return keys

    def values(self):
        vals = Vector(self.size)
        for b in self.buckets:
            current = b
            while current is not None:
                vals.append(current.value)
                current = current.next
        return vals


def identity_dictionary(size=INITIAL_CAPACITY):
    """A Dictionary whose keys match only themselves."""
    d = Dictionary(size)
    d.identity = True
    return d
