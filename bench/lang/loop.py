s = 0
for i in range(10000000):
    s = s + i * 0.5
print(s)
