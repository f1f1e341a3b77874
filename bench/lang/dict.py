# dict.py: the same program as dict.nbl / dict.lua, for CPython.
d = {}
n = 200000
for i in range(n):
    d[f"w{i}"] = i
s = 0
for r in range(5):
    for i in range(n):
        s = s + d[f"w{i}"]
print(s)
