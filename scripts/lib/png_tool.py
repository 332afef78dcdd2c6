#!/usr/bin/python3
"""Screenshot PNG helper for scripts/prometheus-screenshot (stdlib only:
no Pillow). Reads 8-bit RGB or RGBA, non-interlaced PNGs (what Chromium
writes).

  png_tool.py check FILE MIN_COLOURS MIN_NON_WHITE_SHARE
      prints the size, the number of distinct colours and the share of
      pixels that are not white-ish; exits 1 when there are fewer than
      MIN_COLOURS colours or a smaller non-white share: a page that never
      rendered (blank, or a single error line) fails, a page with charts,
      legends and text passes
  png_tool.py trim FILE MARGIN
      rewrites FILE without the rows of page background below its content
      (keeping MARGIN of them): the window is taller than the page so that
      the browser never scrolls, and the rest is cut here
"""

import struct
import sys
import zlib


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour "
                         f"type {colour}, interlace {interlace})")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def encode(path, width, height, bpp, rows):
    """Writes rows as a PNG, each row with the Up filter (small for pages)."""
    out, prev = bytearray(), bytes(len(rows[0]))
    for line in rows:
        out.append(2)
        out.extend((x - p) & 0xFF for x, p in zip(line, prev))
        prev = line

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body)))

    colour = 2 if bpp == 3 else 6
    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                chunk(b"IDAT", zlib.compress(bytes(out), 9)) +
                chunk(b"IEND", b""))


def trim(path, margin):
    width, height, bpp, rows = decode(path)
    background = rows[-1]
    keep = len(rows)
    while keep > 1 and rows[keep - 1] == background:
        keep -= 1
    keep = min(len(rows), keep + margin)
    encode(path, width, keep, bpp, rows[:keep])
    print(f"{path}: {width}x{height} trimmed to {width}x{keep}")
    return 0


def check(path, min_colours, min_share):
    width, height, bpp, rows = decode(path)
    colours, non_white = set(), 0
    for line in rows:
        for x in range(0, len(line), bpp):
            px = line[x:x + 3]
            colours.add(px)
            if min(px) < 230:
                non_white += 1
    share = non_white / (width * height)
    print(f"{path}: {width}x{height}, {len(colours)} colours, "
          f"{share:.1%} of pixels not white")
    if len(colours) < min_colours or share < min_share:
        print(f"{path}: looks blank (want at least {min_colours} colours and "
              f"{min_share:.1%} non-white pixels)", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "check":
        return check(argv[2], int(argv[3]), float(argv[4]))
    if len(argv) == 4 and argv[1] == "trim":
        return trim(argv[2], int(argv[3]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
