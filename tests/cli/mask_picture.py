#!/usr/bin/env python3
"""tests/cli/mask_picture.py - what a reader sees in `spattn mask` pictures.

usage: mask_picture.py SPATTN_BINARY OUT_DIR

Draws a dilated mask (structure finer than a block: an inset is expected) and
a causal one (no inset), reads the PNGs back (a small decoder on zlib, no
imaging package) and checks, for the block and the token pictures:
  - the size the tool reports is the PNG's, and the panel (found as the
    longest horizontal run of frame ink) is the size --size asks for;
  - a title: at least three lines of text above the top axis;
  - axes: tick marks on all four sides of the panel and numbers beside them;
  - a legend under the panel with a swatch of each colour it names;
  - the inset: its region outlined on the block panel and a second framed
    panel of pairs to the right, for the dilated mask only.
The colours are those of tools/spattn/mask_image.hpp and figure_layout.hpp.
"""
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

INK = (40, 40, 40)
WHITE = (255, 255, 255)
FULL = (33, 82, 150)
PARTIAL = (240, 150, 40)
WASTED = (190, 214, 238)
INSET_MARK = (190, 0, 190)


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 2), f"{path}: not 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * 3, [], bytearray(width * 3)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, 3)])
        prev = line
    return width, height, rows


def runs(values, colour):
    """[(start, length)] of the runs of `colour` in a row or column."""
    out, start = [], None
    for i, v in enumerate(values + [None]):
        if v == colour and start is None:
            start = i
        elif v != colour and start is not None:
            out.append((start, i - start))
            start = None
    return out


def bands(rows):
    """Number of runs of rows holding any non-white pixel."""
    return len(runs([any(p != WHITE for p in row) for row in rows], True))


def check(path, reported, panel, inset, legend_colours):
    failures = []
    width, height, rows = read_png(path)
    if (width, height) != reported:
        failures.append(f"reported {reported[0]} x {reported[1]}, PNG is {width} x {height}")
    # The panel's frame: the longest run of ink in a row whose first pixel
    # starts a vertical run of ink (its top edge: tick marks may lengthen the
    # bottom edge, which starts no such run), then its left edge down.
    edges = sorted(((n, y, x) for y, row in enumerate(rows) for x, n in runs(row, INK) if n > 8), reverse=True)
    length, top, left = next((n, y, x) for n, y, x in edges
                             if y + 3 < height and all(rows[y + d][x] == INK for d in (1, 2, 3)))
    bottom = top + runs([rows[y][left] for y in range(top, height)], INK)[0][1] - 1
    right = left + length - 1
    if (length - 2, bottom - top - 1) != panel:
        failures.append(f"panel is {length - 2} x {bottom - top - 1} pixels, expected {panel[0]} x {panel[1]}")
        return failures
    # Title: three lines over the top axis (its label, numbers and tick marks).
    if bands(rows[:top]) < 6:
        failures.append(f"{bands(rows[:top])} bands of text above the panel, expected a title of 3 lines and an axis")
    # Tick marks on every side, numbers beside them.
    sides = {"left": [rows[y][left - 2] for y in range(top, bottom + 1)],
             "right": [rows[y][right + 2] for y in range(top, bottom + 1)],
             "top": rows[top - 2][left:right + 1], "bottom": rows[bottom + 2][left:right + 1]}
    for side, line in sides.items():
        if len(runs(list(line), INK)) < 3:
            failures.append(f"fewer than 3 tick marks on the {side} axis")
    numbers_left = [p for y in range(top, bottom + 1) for p in rows[y][:left - 6]]
    if INK not in numbers_left:
        failures.append("no numbers left of the panel")
    # Legend: under the panel and its bottom axis, a swatch of every colour named.
    below = {p for row in rows[bottom + 1:] for p in row}
    for colour in legend_colours:
        if colour not in below:
            failures.append(f"legend has no swatch of {colour}")
    # The inset: its region marked on the panel, and pairs in a second panel to the right.
    panel = {p for y in range(top, bottom + 1) for p in rows[y][left:right + 1]}
    beside = {p for y in range(height) for p in rows[y][right + 40:]}
    if inset and (INSET_MARK not in panel or FULL not in beside or WASTED not in beside):
        failures.append("no inset (region on the panel, pairs beside it)")
    if not inset and (INSET_MARK in panel or INSET_MARK in below):
        failures.append("an inset where none was expected")
    return failures


def main():
    spattn, out_dir = sys.argv[1], Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = [
        # (name, flags, block panel (width, height), token panel (width, height), inset expected)
        ("dilated", ["--pattern", "dilated", "--segments", "16,32", "--rates", "2,4", "--seq", "64", "--block", "8",
                     "--heads", "4"], (256, 256), (256, 256), True),
        ("causal", ["--pattern", "causal", "--seq", "96", "--seq-k", "256", "--block", "16"], (256, 96), (256, 96),
         False),
    ]
    failed = False
    for name, flags, block_side, token_side, inset in cases:
        out = out_dir / f"{name}.png"
        result = subprocess.run([spattn, "mask", *flags, "--size", "256", "--out", str(out)],
                                capture_output=True, text=True, check=True)
        reported = {Path(p).name: (int(w), int(h))
                    for p, w, h in re.findall(r"wrote\s+(\S+) \((\d+) x (\d+)\)", result.stdout)}
        pictures = [(out, block_side, inset, [FULL, PARTIAL, WHITE]),
                    (out_dir / f"{name}_tokens.png", token_side, False, [FULL, WASTED, WHITE])]
        for path, side, with_inset, legend in pictures:
            if path.name not in reported:
                print(f"FAIL {path}: not reported in\n{result.stdout}")
                failed = True
                continue
            for failure in check(path, reported[path.name], side, with_inset, legend + [INK]):
                print(f"FAIL {path}: {failure}")
                failed = True
            print(f"checked {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
