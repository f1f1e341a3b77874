#!/usr/bin/env python3
"""transform.py — rewrites one CUDA source so a host C++ compiler can build it
against the emulated device (cuda/emu/emu.h, docs/cuda.md "Emulated device").

    transform.py IN.cu OUT.cpp

Two rewrites, both keeping every line where it was (a `#line` directive names
the original file, so compiler messages, ASan reports and the emulator's own
reports point into cuda/*.cu):

  * a launch  `kernel<T><<<grid, block[, smem[, stream]]>>>(args)`  becomes
    `::emu::launch(::emu::Site{"kernel<T>", __FILE__, __LINE__},
                   ::emu::Config(grid, block[, smem[, stream]]), kernel<T>, args)`;
  * a shared-memory declaration  `__shared__ T name[N];`  becomes a reference
    into the running block's shared arena (`::emu::shared_static`), and
    `extern __shared__ T name[];`  a pointer to the launch's dynamic part.

Only these two constructs are touched: the sources stay plain CUDA C++.
"""
import os
import re
import sys


def fail(path, text, pos, why):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"{path}:{line}: transform.py: {why}")


def matching(text, i, open_ch, close_ch):
    """Index just past the bracket closing text[i] (== open_ch); -1 if none."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        elif c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        i += 1
    return -1


def kernel_start(text, end):
    """Start of the kernel expression ending at `end` (an identifier, maybe
    qualified and with template arguments)."""
    i = end
    while True:
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        if i > 0 and text[i - 1] == ">":          # template arguments
            depth = 0
            while i > 0:
                i -= 1
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
            i -= 1
        if i >= 2 and text[i - 2:i] == "::":
            i -= 2
            continue
        return i


def split_top(s):
    """Splits s at top-level commas (outside (), [], {}, <> is not tracked)."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return parts


def rewrite_launches(path, text):
    out, pos = [], 0
    while True:
        i = text.find("<<<", pos)
        if i < 0:
            out.append(text[pos:])
            return "".join(out)
        j = text.find(">>>", i)
        if j < 0:
            fail(path, text, i, "unterminated <<<")
        k0 = kernel_start(text, i)
        kernel = text[k0:i].strip()
        if not kernel:
            fail(path, text, i, "no kernel name before <<<")
        config = text[i + 3:j]
        p = j + 3
        while p < len(text) and text[p] in " \t\n":
            p += 1
        if p >= len(text) or text[p] != "(":
            fail(path, text, j, "expected ( after >>>")
        q = matching(text, p, "(", ")")
        if q < 0:
            fail(path, text, p, "unbalanced kernel arguments")
        args = text[p + 1:q - 1]
        nconf = len(split_top(config))
        if not 2 <= nconf <= 4:
            fail(path, text, i, f"a launch configuration has 2 to 4 parts, not {nconf}")
        name = " ".join(kernel.split()).replace('"', "")
        call = (f'::emu::launch(::emu::Site{{"{name}", __FILE__, __LINE__}}, ::emu::Config({config}), '
                f'{kernel}{", " if args.strip() else ""}{args})')
        out.append(text[pos:k0])
        out.append(call)
        # keep the line count: the call above holds the newlines of config and args
        gap = text[i:q].count("\n") - call.count("\n")
        out.append("\n" * max(gap, 0))
        pos = q


SHARED = re.compile(
    r"(?m)^(?P<indent>[ \t]*)(?P<ext>extern\s+)?__shared__\s+(?:__align__\s*\(\s*(?P<align>\d+)\s*\)\s+)?"
    r"(?P<type>[^;]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*);")


def rewrite_shared(path, text):
    def one(m):
        ind = m.group("indent")
        typ, name, dims = m.group("type").strip(), m.group("name"), m.group("dims").replace(" ", "")
        if not typ:
            fail(path, text, m.start(), "cannot parse the __shared__ declaration")
        if m.group("ext"):
            if dims != "[]":
                fail(path, text, m.start(), "extern __shared__ must be an unsized array")
            align = m.group("align") or "16"
            return (f'{ind}{typ} *const {name} = ({typ} *)::emu::shared_dynamic({align}, "{name}");')
        return (f'{ind}static char emu_tag_{name}; {typ} (&{name}){dims} = '
                f'*::emu::shared_static<{typ}{dims}>(&emu_tag_{name}, "{name}");'
                if dims else
                f'{ind}static char emu_tag_{name}; {typ} &{name} = '
                f'*::emu::shared_static<{typ}>(&emu_tag_{name}, "{name}");')
    return SHARED.sub(one, text)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: transform.py IN.cu OUT.cpp")
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    body = rewrite_shared(src, rewrite_launches(src, text))
    if body.count("\n") != text.count("\n"):
        sys.exit(f"{src}: transform.py: internal error: the line count changed")
    tmp = dst + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{os.path.abspath(src)}"\n{body}')
    os.replace(tmp, dst)


if __name__ == "__main__":
    main()
