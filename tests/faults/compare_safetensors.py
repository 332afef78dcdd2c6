#!/usr/bin/python3
"""compare_safetensors.py A B [--ignore-metadata KEY...]: exit 0 when the two
safetensors files hold the same tensors (names, dtypes, shapes, bytes bit
for bit) and the same __metadata__ but for the keys ignored (the layout an
export was written at: world_size, sharding_factor); otherwise print each
difference and exit 1. Standard library only."""
import json
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {
        name: (t["dtype"], t["shape"],
               data[t["data_offsets"][0]:t["data_offsets"][1]])
        for name, t in header.items()
    }
    return meta, tensors


def main(argv):
    a_path, b_path = argv[1], argv[2]
    ignore = set(argv[4:]) if len(argv) > 3 and argv[3] == "--ignore-metadata" else set()
    (ma, ta), (mb, tb) = load(a_path), load(b_path)
    bad = []
    for k in sorted(set(ma) | set(mb)):
        if k not in ignore and ma.get(k) != mb.get(k):
            bad.append("metadata %s: %r vs %r" % (k, ma.get(k), mb.get(k)))
    for name in sorted(set(ta) | set(tb)):
        if name not in ta or name not in tb:
            bad.append("tensor %s only in one file" % name)
        elif ta[name] != tb[name]:
            bad.append("tensor %s differs" % name)
    for line in bad:
        print(line)
    print("%d tensors compared, %d differences" % (len(ta), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
