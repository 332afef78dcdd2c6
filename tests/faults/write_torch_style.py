#!/usr/bin/python3
"""write_torch_style.py FILE PARAMS: writes FILE, a safetensors file with the
standard library only, the way the format specifies it (as torch's / Hugging
Face's save_file writes a state_dict: 8-byte little-endian header length,
JSON header, data in name order), for the example trainer's default MLP
(units "layer<l>": "weight" [out, in], "bias" [out]; widths 32-64-64-8),
layer 0 in F32, layer 1 in BF16, layer 2 in F16; and PARAMS, the fp32
values the trainer's --params_out must then hold (per layer weight then
bias). Element k of a tensor is ((k * 7 + l) % 33 - 16) / 16, exact in
every dtype."""
import json
import struct
import sys

WIDTHS = [32, 64, 64, 8]
DTYPES = ["F32", "BF16", "F16"]


def encode(dtype, values):
    if dtype == "F32":
        return b"".join(struct.pack("<f", v) for v in values)
    if dtype == "F16":
        return b"".join(struct.pack("<e", v) for v in values)
    return b"".join(struct.pack("<f", v)[2:] for v in values)  # BF16


def main(path, params_path):
    tensors = {}
    expected = b""
    for l in range(len(WIDTHS) - 1):
        n_in, n_out = WIDTHS[l], WIDTHS[l + 1]
        for name, shape in (("weight", [n_out, n_in]), ("bias", [n_out])):
            numel = shape[0] * (shape[1] if len(shape) > 1 else 1)
            values = [((k * 7 + l) % 33 - 16) / 16.0 for k in range(numel)]
            tensors["layer%d.%s" % (l, name)] = (DTYPES[l], shape, values)
            expected += struct.pack("<%df" % numel, *values)
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name in sorted(tensors):
        dtype, shape, values = tensors[name]
        raw = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    with open(params_path, "wb") as f:
        f.write(expected)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
