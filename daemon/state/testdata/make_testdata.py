#!/usr/bin/python3
"""Writes testdata/pytorch_style.safetensors with the standard library only,
the way the safetensors format specifies it (what PyTorch / Hugging Face's
save_file writes): an 8-byte little-endian header length, a JSON header
with "__metadata__" and per tensor "dtype", "shape" and "data_offsets"
(relative to the end of the header), then the data, little-endian,
row-major. Tensors are laid out in the order of their names, as
safetensors does, and the header is padded with spaces to 8 bytes.

Values: element k of tensor T is a small exact function of k so that the
C++ test can check every element:
  "l0.weight"  F32  [3, 4]  k * 0.5 - 2
  "l0.bias"    BF16 [4]     k + 1          (exact in bf16)
  "l1.weight"  F16  [2, 3]  k * 0.25       (exact in fp16)
  "l1.bias"    F64  [3]     -k
  "step_count" I64  []      7              (not loadable as float)

Run: /usr/bin/python3 daemon/state/testdata/make_testdata.py
"""
import json
import os
import struct


def main():
    tensors = {
        "l0.weight": ("F32", [3, 4], "<f", [k * 0.5 - 2 for k in range(12)]),
        "l0.bias": ("BF16", [4], None, [k + 1.0 for k in range(4)]),
        "l1.weight": ("F16", [2, 3], "<e", [k * 0.25 for k in range(6)]),
        "l1.bias": ("F64", [3], "<d", [-float(k) for k in range(3)]),
        "step_count": ("I64", [], "<q", [7]),
    }
    header = {"__metadata__": {"format": "pt", "writer": "make_testdata.py"}}
    data = b""
    for name in sorted(tensors):
        dtype, shape, fmt, values = tensors[name]
        if dtype == "BF16":
            # The top half of the fp32 bits (exact for these values).
            raw = b"".join(struct.pack("<f", v)[2:] for v in values)
        else:
            raw = b"".join(struct.pack(fmt, v) for v in values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "pytorch_style.safetensors")
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


if __name__ == "__main__":
    main()
