#!/usr/bin/python3
"""Tests of the plotting builtins (plot, scatter, hist, imshow).

Runs nabla scripts (NABLA = the nabla binary) and checks
  - the terminal (text/plain) rendering's structure: title, axis labels,
    min/max tick labels, braille dots, direct legend labels, width <= 80;
  - the SVG written by file="x.svg": valid XML, one polyline per series (per
    finite run) with the right number of points, nice tick labels, title,
    legend, decimation of huge series;
  - the PNG written by imshow(file="x.png"): size and pixel values against
    the colormaps (decoded here with zlib);
  - errors: mismatched lengths, empty data, NaN-only data, bad options — each
    a catchable error naming the function, never a crash;
  - the mime bundle a front end receives (text/plain first, image/svg+xml,
    base64 image/png, display_id and update), through a small C host program
    linked against libnabla.a (NABLA_BUILD) with a recording sink (SKIP when it
    cannot be built).
Output: one line per test, PASS/FAIL; exit 1 when anything failed.
Mentions NABLA_ASAN so tools/run-tests.sh runs it again under the ASan build,
where any sanitizer report (leaks included) fails the test.
"""
import base64
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NABLA = os.environ.get("NABLA") or os.path.join(ROOT, "build", "nabla")
NABLA_BUILD = os.environ.get("NABLA_BUILD") or os.path.dirname(NABLA)
ASAN = bool(os.environ.get("NABLA_ASAN"))
SVGNS = "{http://www.w3.org/2000/svg}"
TMP = tempfile.mkdtemp(prefix="nabla-plot-")
FAILED = 0

BRAILLE = re.compile("[\u2801-\u28ff]")


def report(name, ok, why=""):
    global FAILED
    if ok:
        print(f"PASS: {name}")
    else:
        FAILED += 1
        why = " ".join(str(why).split())[:400]
        print(f"FAIL: {name}: {why}")
    sys.stdout.flush()


def run(src, name="t", expect_rc=0):
    """Runs a nabla script; returns stdout.  Raises AssertionError on a bad
    exit status or any sanitizer report."""
    path = os.path.join(TMP, name + ".nbl")
    with open(path, "w") as f:
        f.write(src)
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    p = subprocess.run([NABLA, path], capture_output=True, timeout=300, env=env, cwd=TMP)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    if "Sanitizer" in err or "runtime error:" in err:
        raise AssertionError("sanitizer report: " + err[:600])
    if p.returncode != expect_rc:
        raise AssertionError(f"exit status {p.returncode} (expected {expect_rc}); stderr: {err[:400]}")
    return out


def test(fn):
    try:
        fn()
        report(fn.__name__, True)
    except AssertionError as e:
        report(fn.__name__, False, e)
    except Exception as e:  # a bug in the test or a crash
        report(fn.__name__, False, f"{type(e).__name__}: {e}")
    return fn


def check(cond, why):
    if not cond:
        raise AssertionError(why)


def tmp(name):
    return os.path.join(TMP, name)


# ------------------------------------------------------------------ PNG reading
def read_png(path):
    """-> (width, height, channels, rows of bytes); 8-bit RGB/RGBA/gray only."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature")
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        typ = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        check(zlib.crc32(typ + body) & 0xffffffff == crc, f"bad CRC in {typ!r}")
        if typ == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat += body
        elif typ == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    check(depth == 8 and interlace == 0, "unexpected PNG format")
    ch = {0: 1, 2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * ch
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        ft = raw[i]; line = bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
        for x in range(stride):
            a = line[x - ch] if x >= ch else 0
            b = prev[x]
            c = prev[x - ch] if x >= ch else 0
            if ft == 1: line[x] = (line[x] + a) & 255
            elif ft == 2: line[x] = (line[x] + b) & 255
            elif ft == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pr) & 255
        rows.append(bytes(line)); prev = line
    return w, h, ch, rows


def pixel(png, x, y):
    w, h, ch, rows = png
    return tuple(rows[y][x * ch:(x + 1) * ch])


VIRIDIS = [(0x44, 0x01, 0x54), (0x48, 0x28, 0x78), (0x3e, 0x4a, 0x89), (0x31, 0x68, 0x8e), (0x26, 0x82, 0x8e),
           (0x1f, 0x9e, 0x89), (0x35, 0xb7, 0x79), (0x6d, 0xcd, 0x59), (0xb4, 0xde, 0x2c), (0xfd, 0xe7, 0x25)]


def viridis(t):
    p = t * 9; i = min(int(p), 8); u = p - i
    return tuple(int(VIRIDIS[i][k] + (VIRIDIS[i + 1][k] - VIRIDIS[i][k]) * u + 0.5) for k in range(3))


# ------------------------------------------------------------------ SVG helpers
def svg(path):
    tree = ET.parse(path)   # raises on invalid XML
    return tree.getroot()


def texts(root, cls):
    return [t.text for t in root.iter(SVGNS + "text") if t.get("class") == cls]


def series_groups(root):
    return [g for g in root.iter(SVGNS + "g") if g.get("class") == "series"]


def polyline_points(pl):
    return [tuple(map(float, p.split(","))) for p in pl.get("points").split()]


# ------------------------------------------------------------------ text rendering
def width(line):
    return len(line)   # every character used is one column wide


@test
def text_line_structure():
    out = run('xs = linspace(0, 10, 200)\n'
              'plot(xs, sin(xs) * 2 + 1, title="Sine wave", xlabel="time (s)", ylabel="volts")\n')
    lines = out.rstrip("\n").split("\n")
    check(all(width(l) <= 80 for l in lines), "a line is wider than 80 columns")
    check(lines[0].strip() == "Sine wave", f"first line is not the title: {lines[0]!r}")
    check(lines[1].strip() == "volts", f"second line is not the y label: {lines[1]!r}")
    rows = [l for l in lines if "\u2524" in l or "\u2502" in l]
    check(len(rows) == 15, f"{len(rows)} plot rows, expected 15")
    top = rows[0].split("\u2524")[0].strip(); bot = rows[-1].split("\u2524")[0].strip()
    check(abs(float(top) - 3) < 0.01 and abs(float(bot) + 1) < 0.01, f"y range labels {top} .. {bot}, expected ~3 .. -1")
    check(sum(len(BRAILLE.findall(r)) for r in rows) > 60, "too few braille dots")
    axis = [l for l in lines if "\u2514" in l]
    check(len(axis) == 1, "no x axis line")
    xl = lines[lines.index(axis[0]) + 1].split()
    check(xl[0] == "0" and xl[-1] == "10", f"x tick labels {xl}, expected 0 ... 10")
    check(lines[-1].strip() == "time (s)", f"last line is not the x label: {lines[-1]!r}")
    # every column of the plot has a dot (the line is connected)
    start = rows[0].index("\u2524") + 1
    cols = max(len(r) for r in rows) - start
    filled = [any(len(r) > start + c and BRAILLE.match(r[start + c]) for r in rows) for c in range(min(cols, 60))]
    check(all(filled), "the line has gaps")


@test
def text_legend_direct_labels():
    out = run('l = exp(-linspace(0, 4, 50))\n'
              'plot(stack([l, l + 0.5], axis=1), legend=list("train", "val"), title="loss")\n')
    check("\u25c2 train" in out and "\u25c2 val" in out, "direct labels missing")
    lines = out.split("\n")
    ti = [i for i, l in enumerate(lines) if "\u25c2 train" in l][0]
    vi = [i for i, l in enumerate(lines) if "\u25c2 val" in l][0]
    check(vi < ti, "the val label should be above the train label (val ends higher)")
    check(all(width(l) <= 80 for l in lines), "a line is wider than 80 columns")


@test
def text_scatter_glyph_legend():
    out = run('scatter(randn(30), list(randn(30), randn(30) + 5), legend=list("a", "b"))\n')
    check("\u2022 a" in out and "x b" in out, "glyph legend line missing")
    check("\u2022" in out.split("\u2514")[0] and "x" in out.split("\u2514")[0], "glyphs missing from the plot area")


@test
def text_hist():
    out = run('hist(list(1, 1, 1, 2, 3, 3), bins=3, title="h")\n')
    lines = out.rstrip("\n").split("\n")
    check(lines[0].strip() == "h", "title")
    rows = [l for l in lines if "\u2524" in l or "\u2502" in l]
    check(rows[0].split("\u2524")[0].strip() == "3", f"top label {rows[0]!r}")
    check(rows[-1].split("\u2524")[0].strip() == "0", "bottom label is not 0")
    full = "\u2588"
    top_bars = rows[0].split("\u2524")[1]
    check(top_bars.startswith(full) and top_bars.strip(" " + full) == "", f"the tallest bar (bin 1) should reach the top: {top_bars!r}")
    check("6 values in 3 bins" in out, "summary line")


@test
def text_imshow():
    out = run('imshow(eye(8), title="identity")\n')
    lines = out.rstrip("\n").split("\n")
    check(lines[0].strip() == "identity", "title")
    check(lines[1].lstrip().startswith("\u250c") and lines[1].rstrip().endswith("\u2510"), "top border")
    inner = [l for l in lines if l.lstrip().startswith("\u2502")]
    check(len(inner) == 8, f"{len(inner)} image rows, expected 8 (2 columns per pixel)")
    check(inner[0].strip()[1:3] == "\u2588\u2588" and inner[7].strip()[-3:-1] == "\u2588\u2588", "diagonal not drawn")
    check("8\u00d78" in out and "viridis" in out, "shape/colormap line")


@test
def text_constant_and_nan():
    out = run('plot(list(3, 3, 3))\nplot(list(1, nan, 3, inf, 5, -inf))\n')
    check("nan" not in out.lower() and "inf" not in out.lower(), "NaN/inf leaked into labels")
    check(BRAILLE.search(out), "no dots")


# ------------------------------------------------------------------ SVG
@test
def svg_line_plot():
    f = tmp("line.svg")
    run(f'xs = linspace(0, 99, 100)\n'
        f'plot(xs, stack([xs, xs * 0.5], axis=1), legend=list("a", "b & <c>"), title="My <plot>",'
        f' xlabel="step", ylabel="loss", file="{f}")\n')
    root = svg(f)
    check(root.tag == SVGNS + "svg" and root.get("width") == "640" and root.get("height") == "400", "svg size")
    groups = series_groups(root)
    check(len(groups) == 2, f"{len(groups)} series groups")
    colors = set()
    for g in groups:
        pls = list(g.iter(SVGNS + "polyline"))
        check(len(pls) == 1, "one polyline per series")
        check(len(polyline_points(pls[0])) == 100, "100 points per polyline")
        colors.add(pls[0].get("stroke"))
    check(len(colors) == 2, "series share a color")
    check(texts(root, "xtick") == ["0", "20", "40", "60", "80", "100"], f"x ticks {texts(root, 'xtick')}")
    check(texts(root, "ytick") == ["0", "20", "40", "60", "80", "100"], f"y ticks {texts(root, 'ytick')}")
    check(texts(root, "title") == ["My <plot>"], "title")
    check(texts(root, "xlabel") == ["step"] and texts(root, "ylabel") == ["loss"], "axis labels")
    leg = [g for g in root.iter(SVGNS + "g") if g.get("class") == "legend"]
    check(len(leg) == 1 and [t.text for t in leg[0].iter(SVGNS + "text")] == ["a", "b & <c>"], "legend")
    # the first point is at x tick 0, the line is increasing upwards
    pts = polyline_points(list(groups[0].iter(SVGNS + "polyline"))[0])
    check(pts[0][1] > pts[-1][1], "y axis not pointing up")


@test
def svg_nice_ticks_small_range():
    f = tmp("ticks.svg")
    run(f'plot(list(0.0012, 0.0031, 0.0025), file="{f}")\n')
    ys = texts(svg(f), "ytick")
    check(ys == ["0.0015", "0.0020", "0.0025", "0.0030"] or ys == ["0.0012", "0.0014", "0.0016", "0.0018", "0.0020", "0.0022", "0.0024", "0.0026", "0.0028", "0.0030"],
          f"y ticks {ys}")
    vals = [float(v) for v in ys]
    steps = {round(b - a, 10) for a, b in zip(vals, vals[1:])}
    check(len(steps) == 1, "uneven tick steps")
    step = steps.pop(); mant = step / 10 ** __import__("math").floor(__import__("math").log10(step))
    check(round(mant, 6) in (1, 2, 5), f"step {step} is not 1-2-5")


@test
def svg_nan_breaks_line():
    f = tmp("nan.svg")
    run(f'plot(list(1, 2, nan, 4, 5, inf, 7), file="{f}")\n')
    g = series_groups(svg(f))[0]
    pls = [len(polyline_points(p)) for p in g.iter(SVGNS + "polyline")]
    check(pls == [2, 2, 1], f"runs {pls}, expected [2, 2, 1]")


@test
def svg_constant_data():
    f = tmp("const.svg")
    run(f'plot(list(5, 5, 5, 5), file="{f}")\n')
    root = svg(f)
    ys = [float(v) for v in texts(root, "ytick")]
    check(len(ys) >= 2 and min(ys) <= 5 <= max(ys), f"y ticks {ys}")
    pts = polyline_points(next(series_groups(root)[0].iter(SVGNS + "polyline")))
    check(len(pts) == 4 and len({p[1] for p in pts}) == 1, "flat line")


@test
def svg_decimation():
    f = tmp("big.svg")
    run(f'n = 200000\nxs = arange(n)\nys = sin(xs * 0.001)\nys[123457] = 5\nys[7] = -3\n'
        f'plot(xs, ys, file="{f}")\n')
    root = svg(f)
    pls = list(series_groups(root)[0].iter(SVGNS + "polyline"))
    pts = [p for pl in pls for p in polyline_points(pl)]
    check(1000 <= len(pts) <= 5000, f"{len(pts)} points after decimation")
    ys = [p[1] for p in pts]
    check(os.path.getsize(f) < 200000, "SVG too large")
    # the spikes survive: the highest point (5) and the lowest (-3) are kept
    ticks = texts(root, "ytick")
    check("4" in ticks and "-2" in ticks, f"range lost: {ticks}")
    check(min(ys) < 60 and max(ys) > 330, f"extremes lost: {min(ys)}..{max(ys)}")


@test
def svg_scatter():
    f = tmp("scatter.svg")
    run(f'scatter(list(1, 2, nan, 4), list(4, 3, 2, 1), title="s", file="{f}")\n')
    root = svg(f)
    circles = list(series_groups(root)[0].iter(SVGNS + "circle"))
    check(len(circles) == 3, f"{len(circles)} circles, expected 3 (NaN skipped)")
    f2 = tmp("scatter_big.svg")
    run(f'scatter(randn(50000), randn(50000), file="{f2}")\n')
    n = len(list(svg(f2).iter(SVGNS + "circle")))
    check(n < 50000, "large scatter not thinned")


@test
def svg_hist_counts():
    f = tmp("hist.svg")
    run(f'hist(list(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, nan), bins=5, title="h", file="{f}")\n')
    root = svg(f)
    rects = [r for g in root.iter(SVGNS + "g") if g.get("class") == "bars" for r in g.iter(SVGNS + "rect")]
    check(len(rects) == 5, f"{len(rects)} bars")
    counts = [int(r.find(SVGNS + "title").text.rsplit(":", 1)[1]) for r in rects]
    check(counts == [2, 2, 2, 2, 3], f"counts {counts} (numpy gives [2, 2, 2, 2, 3])")
    hs = [float(r.get("height")) for r in rects]
    check(abs(hs[4] / hs[0] - 1.5) < 0.01, "bar heights not proportional")
    f2 = tmp("hist_edges.svg")
    run(f'hist(list(0.5, 1.5, 1.7, 9), bins=list(0, 1, 2, 10), file="{f2}")\n')
    rects = [r for g in svg(f2).iter(SVGNS + "g") if g.get("class") == "bars" for r in g.iter(SVGNS + "rect")]
    counts = [int(r.find(SVGNS + "title").text.rsplit(":", 1)[1]) for r in rects]
    check(counts == [1, 2, 1], f"edge bins counts {counts}")


@test
def svg_size_and_imshow():
    f = tmp("sized.svg")
    run(f'plot(list(1, 2), width=300, height=200, file="{f}")\n')
    root = svg(f)
    check(root.get("width") == "300" and root.get("height") == "200", "width/height not applied")
    f2 = tmp("im.svg")
    run(f'imshow(rand(4, 6), title="img", file="{f2}")\n')
    root = svg(f2)
    imgs = list(root.iter(SVGNS + "image"))
    check(len(imgs) == 1, "no embedded image")
    href = imgs[0].get("{http://www.w3.org/1999/xlink}href")
    check(href.startswith("data:image/png;base64,"), "image is not a PNG data URI")
    png = base64.b64decode(href.split(",", 1)[1])
    p = tmp("embedded.png"); open(p, "wb").write(png)
    w, h, ch, rows = read_png(p)
    # crisp without CSS: a whole-factor upscale to ~720 px on the long side,
    # every source pixel one uniform k x k block
    k = w // 6
    check((w, h) == (6 * k, 4 * k) and 6 * k >= 720, f"embedded image is {w}x{h}, expected a whole multiple of 6x4 >= 720 wide")
    blocky = all(rows[y][x * ch:(x + 1) * ch] == rows[(y // k) * k][((x // k) * k) * ch:((x // k) * k + 1) * ch]
                 for y in range(0, h, 7) for x in range(0, w, 5))
    check(blocky, "the embedded image is not nearest-neighbour blocks")
    f3 = tmp("im_px.png")
    run(f'seed(3)\nimshow(rand(4, 6), file="{f3}")\n')
    f4 = tmp("im_px.svg")
    run(f'seed(3)\nimshow(rand(4, 6), file="{f4}")\n')
    href4 = list(svg(f4).iter(SVGNS + "image"))[0].get("{http://www.w3.org/1999/xlink}href")
    p4 = tmp("embedded4.png"); open(p4, "wb").write(base64.b64decode(href4.split(",", 1)[1]))
    _, _, ch4, rows4 = read_png(p4)
    _, _, ch3, rows3 = read_png(f3)
    # the SVG shows the same colours as the PNG file (pixel (0,0) and (3,5) of the source)
    k4 = len(rows4[0]) // ch4 // 6
    k3 = len(rows3[0]) // ch3 // 6
    check(rows4[0][:3] == rows3[0][:3] and rows4[3 * k4][5 * k4 * ch4:5 * k4 * ch4 + 3] == rows3[3 * k3][5 * k3 * ch3:5 * k3 * ch3 + 3],
          "the SVG's embedded image differs from the PNG")
    check(texts(root, "title") == ["img"], "title")
    check(any(g.get("class") == "colorbar" for g in root.iter(SVGNS + "g")), "no colorbar")


# ------------------------------------------------------------------ PNG
@test
def png_gray_values():
    f = tmp("gray.png")
    run(f'imshow(tensor([[0, 0.25], [0.5, 1]], dtype="f32"), cmap="gray", file="{f}")\n')
    png = read_png(f)
    w, h, ch, _ = png
    check((w, h, ch) == (256, 256, 3), f"size {w}x{h}x{ch}, expected 256x256x3 (2x2 scaled by 128)")
    want = {(64, 64): 0, (192, 64): 64, (64, 192): 128, (192, 192): 255}
    for (x, y), v in want.items():
        check(pixel(png, x, y) == (v, v, v), f"pixel {x},{y} = {pixel(png, x, y)}, expected {v}")


@test
def png_viridis_values():
    f = tmp("viridis.png")
    run(f'imshow([[0, 1, 2, 3, 4, 5, 6, 7, 8]], file="{f}")\n')
    png = read_png(f)
    w, h, ch, _ = png
    s = 256 // 9
    check((w, h) == (9 * s, s), f"size {w}x{h}")
    for i in range(9):
        got = pixel(png, i * s + s // 2, s // 2)
        check(got == viridis(i / 8), f"value {i}: {got} != {viridis(i / 8)}")
    check(pixel(png, 0, 0) == (0x44, 0x01, 0x54) and pixel(png, w - 1, 0) == (0xfd, 0xe7, 0x25), "viridis ends")


@test
def png_vmin_vmax_and_nan():
    f = tmp("vrange.png")
    run(f'imshow([[-1, 0, 10, nan]], cmap="gray", vmin=0, vmax=10, width=4, height=1, file="{f}")\n')
    png = read_png(f)
    check(png[:3] == (4, 1, 4), f"{png[:3]}: expected 4x1 RGBA (NaN is transparent)")
    check([pixel(png, x, 0) for x in range(4)] == [(0, 0, 0, 255), (0, 0, 0, 255), (255, 255, 255, 255), (0, 0, 0, 0)],
          f"pixels {[pixel(png, x, 0) for x in range(4)]}")


@test
def png_rgb_u8_and_float():
    f = tmp("rgb.png")
    run('img = zeros(2, 3, 3, dtype="u8")\nimg[0, 0, 0] = 255\nimg[1, 2, 1] = 128\nimg[0, 1, 2] = 7\n'
        f'imshow(img, width=3, height=2, file="{f}")\n')
    png = read_png(f)
    check(png[:3] == (3, 2, 3), f"size {png[:3]}")
    check(pixel(png, 0, 0) == (255, 0, 0) and pixel(png, 2, 1) == (0, 128, 0) and pixel(png, 1, 0) == (0, 0, 7), "u8 pixels")
    f2 = tmp("rgbf.png")
    run(f'img = zeros(1, 2, 3)\nimg[0, 0, 0] = 0.5\nimg[0, 1, 2] = 2.0\nimshow(img, width=2, height=1, file="{f2}")\n')
    png = read_png(f2)
    check(pixel(png, 0, 0) == (128, 0, 0) and pixel(png, 1, 0) == (0, 0, 255), f"float pixels {pixel(png, 0, 0)} {pixel(png, 1, 0)}")


@test
def file_written_atomically():
    d = tmp("atomic"); os.makedirs(d, exist_ok=True)
    f = os.path.join(d, "a.svg")
    run(f'for i in range(3) {{ plot(list(1, 2, i), file="{f}") }}\nplot(list(1, 2), file="{os.path.join(d, "a.txt")}")\n')
    check(sorted(os.listdir(d)) == ["a.svg", "a.txt"], f"leftover files: {os.listdir(d)}")
    check(oct(os.stat(f).st_mode & 0o777) == "0o644", "file mode")
    svg(f)
    txt = open(os.path.join(d, "a.txt"), encoding="utf-8").read()
    check("\u2524" in txt and txt.endswith("\n"), "text file")


# ------------------------------------------------------------------ errors
ERRORS = [
    ('plot(list(1, 2, 3), list(1, 2))', "ValueError", "plot: xs has 3 values but ys has 2"),
    ('plot(list())', "ValueError", "plot: ys is empty"),
    ('plot(zeros(0))', "ValueError", "plot: ys is empty"),
    ('plot(list(nan, nan))', "ValueError", "plot: no finite values"),
    ('plot(list(1, "a"))', "TypeError", "plot: ys[1] is a string"),
    ('plot("abc")', "TypeError", "plot: ys must be a tensor"),
    ('plot(zeros(2, 2, 2))', "ValueError", "must be 1-D"),
    ('plot(list(1, 2), legend=list("a", "b"))', "ValueError", "plot: legend has 2 labels for 1 series"),
    ('plot(list(1, 2), width=5)', "ValueError", "plot: width must be between"),
    ('plot(list(1, 2), update=true)', "ValueError", "update=true needs a display_id"),
    ('plot(list(1, 2), file="x.png")', "ValueError", "PNG files are for imshow"),
    ('plot(list(1, 2), file="/nonexistent-dir/x.svg")', "IOError", "plot: cannot write '/nonexistent-dir/x.svg'"),
    ('scatter(list(1, 2))', "TypeError", "scatter: needs xs and ys"),
    ('scatter(list(1, 2), list(1))', "ValueError", "scatter: xs has 2 values but ys has 1"),
    ('plot(list(1, 2), list(list(1, 2), list(1, 2, 3)))', "ValueError", "plot: xs has 2 values but ys[1] has 3"),
    ('hist(list())', "ValueError", "hist: x is empty"),
    ('hist(list(nan, inf))', "ValueError", "hist: x has no finite values"),
    ('hist(list(1, 2), bins=0)', "ValueError", "hist: bins must be a whole number"),
    ('hist(list(1, 2), bins=list(0, 2, 1))', "ValueError", "hist: bin edges must be finite and increasing"),
    ('imshow(zeros(3))', "ValueError", "imshow: expected an image of shape"),
    ('imshow(zeros(3, 3, 2))', "ValueError", "imshow: expected an image of shape"),
    ('imshow(zeros(0, 3))', "ValueError", "imshow: the image is empty"),
    ('imshow(list([1, 2], [3]))', "ValueError", "imshow: image row 1 has 1 values"),
    ('imshow(list(1, 2))', "ValueError", "imshow: expected an image (a list of rows"),
    ('imshow(eye(3), cmap="jet")', "ValueError", "imshow: unknown cmap"),
    ('imshow("x")', "TypeError", "imshow: expected an image tensor"),
]


@test
def errors_are_clear_and_catchable():
    src = "".join(f'r = try {{ {code} ; "no error" }} catch e {{ e.name + ": " + e.message }}\nprint(r)\n' for code, _, _ in ERRORS)
    src += 'print("survived")\n'
    out = run(src).rstrip("\n").split("\n")
    check(out[-1] == "survived", "the script did not finish")
    msgs = [l for l in out if re.match(r"^(\w+Error|no error)", l)]
    check(len(msgs) == len(ERRORS), f"{len(msgs)} error lines for {len(ERRORS)} cases")
    for (code, kind, frag), m in zip(ERRORS, msgs):
        check(m.startswith(kind + ":") and frag in m, f"{code}: got {m!r}, expected {kind} with {frag!r}")


@test
def uncaught_error_report():
    p = subprocess.run([NABLA, "-e", "plot(list(1, 2, 3), list(1, 2))"], capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8", "replace")
    check(p.returncode == 1 and "plot: xs has 3 values but ys has 2" in err, f"rc {p.returncode}, stderr {err[:300]!r}")


@test
def returns_nil_and_doc():
    out = run('print(plot(list(1, 2)) == nil)\nprint(doc(imshow))\n')
    check("true" in out.split("\n"), "plot does not return nil")
    check("imshow(t, title=nil" in out, "doc(imshow)")


# ------------------------------------------------------------------ the mime bundle (C host)
HOST_C = r'''
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nabla.h"
static const char *dir; static int count;
static void w(nb_Sink *s, int st, const char *d, size_t n) { (void)s; (void)st; (void)d; (void)n; }
static void disp(nb_Sink *s, const nb_MimeItem *it, int n, const char *id, int upd) {
  (void)s; char p[4096]; count++;
  snprintf(p, sizeof p, "%s/index.txt", dir); FILE *f = fopen(p, "a");
  fprintf(f, "%d id=%s update=%d", count, id ? id : "-", upd);
  for (int i = 0; i < n; i++) {
    fprintf(f, " %s", it[i].mime);
    snprintf(p, sizeof p, "%s/%d-%d", dir, count, i); FILE *g = fopen(p, "wb");
    fwrite(it[i].data, 1, it[i].len, g); fclose(g);
    if (strlen(it[i].data) != it[i].len) fprintf(f, "!NUL");
  }
  fprintf(f, "\n"); fclose(f);
}
int main(int argc, char **argv) {
  dir = argv[1];
  nb_Sink sink = { w, disp, NULL, NULL, NULL };
  nb_VM *vm = nb_vm_new(&sink);
  int rc = nb_run_file(vm, argv[2]);
  if (rc) fprintf(stderr, "%s\n", nb_last_error(vm)->report);
  nb_vm_free(vm);
  return rc;
}
'''


def build_host():
    lib = os.path.join(NABLA_BUILD, "libnabla.a")
    if not os.path.exists(lib):
        return None, "no libnabla.a in " + NABLA_BUILD
    src = os.path.join(TMP, "host.c"); exe = os.path.join(TMP, "host")
    open(src, "w").write(HOST_C)
    try:
        libs = subprocess.run(["pkg-config", "--libs", "libpng", "libzmq", "jansson", "libcrypto", "openblas", "readline", "zlib"],
                              capture_output=True, text=True, timeout=60).stdout.split()
    except Exception as e:
        return None, f"pkg-config: {e}"
    flags = ["-fsanitize=address,undefined"] if ASAN else []
    cmd = ["cc", "-std=gnu17", "-I", os.path.join(ROOT, "lang"), src, lib] + libs + ["-fopenmp", "-lm", "-ldl", "-lpthread"] + flags + ["-o", exe]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        return None, "cannot link a host program: " + p.stderr[-300:]
    return exe, ""


@test
def file_writes_only_the_file():
    # file= writes the file instead of showing the plot (a script's stdout gets
    # no braille picture); show=true does both; show=false shows nothing
    f1, f2, f3, f4, f5 = tmp("only.svg"), tmp("only.txt"), tmp("only.png"), tmp("both.svg"), tmp("hist.svg")
    for f in (f1, f2, f3, f4, f5):
        if os.path.exists(f):
            os.unlink(f)
    out = run(f'plot(list(1, 3, 2), title="quiet", file="{f1}")\n'
              f'scatter(list(1, 2), list(2, 1), file="{f2}")\n'
              f'imshow(eye(3), file="{f3}")\n'
              f'hist(list(1, 2, 2, 3), file="{f5}")\n'
              f'print("between")\n'
              f'plot(list(5, 1, 4), title="both", file="{f4}", show=true)\n'
              f'plot(list(1, 2), show=false)\n')
    check(out.startswith("between\n") and "quiet" not in out, f"file= printed the plot: {out[:200]!r}")
    check(BRAILLE.search(out) and "both" in out and out.count("both") == 1, f"show=true did not show the plot: {out!r}")
    check(open(f1).read().startswith("<svg") and open(f4).read().startswith("<svg") and open(f5).read().startswith("<svg"), "SVG files")
    check(BRAILLE.search(open(f2, encoding="utf-8").read()) is not None, "the .txt file holds the terminal text")
    check(open(f3, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "imshow's PNG file")
    p = subprocess.run([NABLA, "-e", 'plot(list(1, 2), show="yes")'], capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and "TypeError: plot: show must be true, false or nil, got string" in p.stderr, f"show=\"yes\": {p.stderr[:300]!r}")


def bundle_test():
    name = "mime_bundle"
    exe, why = build_host()
    if not exe:
        print(f"SKIP: {name}: {why}")
        return
    try:
        d = tmp("bundle"); os.makedirs(d, exist_ok=True)
        script = tmp("bundle.nbl")
        open(script, "w").write(
            f'plot(list(1, 2, 3), title="b")\n'
            f'for i in range(3) {{ plot(list(1, 2, i), display_id="loss", update=i > 0) }}\n'
            f'imshow(eye(3), display_id=7, file="{tmp("bundle.png")}", show=true)\n')
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
        p = subprocess.run([exe, d, script], capture_output=True, text=True, timeout=120, env=env)
        check(p.returncode == 0, f"host exit {p.returncode}: {p.stderr[:400]}")
        check("Sanitizer" not in p.stderr and "runtime error" not in p.stderr, "sanitizer report: " + p.stderr[:400])
        idx = open(os.path.join(d, "index.txt")).read().strip().split("\n")
        want = ["1 id=- update=0 text/plain image/svg+xml",
                "2 id=loss update=0 text/plain image/svg+xml",
                "3 id=loss update=1 text/plain image/svg+xml",
                "4 id=loss update=1 text/plain image/svg+xml",
                "5 id=7 update=0 text/plain image/svg+xml image/png"]
        check(idx == want, f"display calls {idx}")
        text = open(os.path.join(d, "1-0"), encoding="utf-8").read()
        check(text.split("\n")[0].strip() == "b" and BRAILLE.search(text) and not text.endswith("\n"), "text/plain item")
        ET.fromstring(open(os.path.join(d, "1-1"), "rb").read())
        b64 = open(os.path.join(d, "5-2")).read()
        check(re.fullmatch(r"[A-Za-z0-9+/]+=*", b64) is not None, "image/png is not base64 text")
        check(base64.b64decode(b64) == open(tmp("bundle.png"), "rb").read(), "bundle PNG differs from the file")
        report(name, True)
    except AssertionError as e:
        report(name, False, e)


bundle_test()

shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if FAILED else 0)
