"""Test models shared by the integration scripts, written with scripts/gen_model.py, and the
reference Expect of every tensor in them."""

import json
import os
import struct
import subprocess

from harness import GEN
from tbmref import Expect, dir_names, mark_duplicates

# Names that exercise the directory encoding of MOUNT_LAYOUT.md, with the directory each must get.
LONG_NAMES = [
    "x" * 255,                      # exactly 255 bytes: unchanged
    "y" * 256,                      # cut to 246
    "a" * 245 + "\u00e9" * 10,      # the 246th byte is inside a 2-byte character: cut to 245
    "b" * 244 + "/" * 5,            # the 246th byte is inside %2F: cut to 244
    "c" * 243 + "\u20ac" * 5,       # 3-byte characters ending exactly at 246
    "d" * 200 + "\U0001F600" * 20,  # 4-byte characters: cut to 244
    "z" * 300 + "1",                # two names that differ past the cut: different hashes
    "z" * 300 + "2",
    "%" * 100,                      # escapes only: 300 bytes encoded, cut to 246
]
SHORT_NAMES = ["a/b", "50%", "ctl\x01\x1f\x7f\n", "", ".", "..", "...", "sp ace \u00fc/\u00df",
               "dup", "dup", "dup", "/leading", "trailing/"]


def sound_tensors(gen):
    """Sound tensors over every precision and mask word size, partial groups, groups straddling
    rows and junk mask bits."""
    mk = gen.make_tensor
    return [
        mk("model.embed.weight", [12, 16], "fp16", (0, 0), 1),
        mk("layer.q.fp32", [8, 16], "fp32", (2, 4), 2),
        mk("layer.k.fp16.straddle", [12, 10], "fp16", (2, 4), 3),
        mk("layer.v.bf16", [6, 8], "bf16", (1, 4), 4),
        mk("layer.o.fp64.partial", [4, 9], "fp64", (2, 8), 5),
        mk("norm.weight", [16], "fp32", (0, 0), 6),
        mk("m16", [5, 20], "fp32", (4, 16), 7),
        mk("m32", [3, 33], "bf16", (8, 32), 8),
        mk("m1", [7], "fp32", (1, 1), 9),
        mk("m3.junk", [10], "fp16", (1, 3), 10, junk_bits=True),
        mk("m5", [3, 7], "fp64", (3, 5), 11),
        mk("m12", [2, 30], "fp16", (6, 12), 12),
        mk("m24.junk", [50], "fp32", (12, 24), 13, junk_bits=True),
        mk("n0", [16], "fp32", (0, 4), 14),
        mk("nm_full", [16], "bf16", (4, 4), 15),
        mk("dense.fp64", [2, 3], "fp64", (0, 0), 16),
        mk("dense.bf16", [5], "bf16", (0, 0), 17),
        mk("reserved.junk", [8], "fp32", (2, 4), 18, reserved=b"junk" * 100),
        mk("mask.gap", [3, 4], "fp16", (2, 4), 19, mask_gap=13),
    ]


def warning_tensors(gen):
    """Tensors that disagree with themselves but are served: each must carry a warning."""
    mk = gen.make_tensor
    return [
        mk("warn.over_n", [4, 8], "fp32", (2, 4), 20, over_n=2),
        mk("warn.conflicts", [4, 8], "fp16", (2, 4), 21, conflicts=3),
        mk("warn.shape", [5, 5], "fp32", (2, 4), 22, num_weights=24),
        mk("warn.index_dtype", [4, 4], "fp32", (2, 4), 23, index={"dtype": "bf16"}),
        mk("warn.index_nm", [4, 4], "fp32", (2, 4), 24, index={"nm_n": 1, "nm_m": 8}),
    ]


def warning_counts_tensor(gen):
    """Index num_weights / num_mask_bytes that differ from the header (container index only)."""
    return gen.make_tensor("warn.index_counts", [4, 4], "fp32", (2, 4), 25,
                           index={"num_weights": 17, "num_mask_bytes": 5})


def name_tensors(gen, names):
    return [gen.make_tensor(n, [4], "fp32", (0, 0), 100 + i) for i, n in enumerate(names)]


def container_expects(cont, tensors):
    dirs = dir_names([t.name for t in tensors])
    return mark_duplicates([Expect(t.name, d, e.get("shape"), t.header, cont.data, e["offset"],
                                   cont.index_start, e)
                            for t, d, e in zip(tensors, dirs, cont.entries)])


def write_container(gen, path, tensors, mtime=None, **kw):
    cont = gen.container(tensors, config={"hidden_size": 16, "num_layers": 1}, **kw)
    gen.write_file(path, cont.data, mtime)
    return cont, container_expects(cont, tensors)


def write_manifest(gen, directory, tensors, mtime=None, special=None):
    """Manifest dir; the expectation of each tensor read from the file its entry names."""
    manifest = gen.write_manifest(directory, tensors, config={"hidden_size": 16},
                                  special=special, mtime=mtime)
    entries = json.loads(manifest)["tensors"]
    dirs = dir_names([t.name for t in tensors])
    out = []
    for t, d, e in zip(tensors, dirs, entries):
        data = gen.blob(t)
        out.append(Expect(t.name, d, e.get("shape"), t.header, data, 0, len(data), e))
    return manifest, mark_duplicates(out)


def write_tb(gen, path, tensor, mtime=None):
    gen.write_tb(path, tensor, mtime)
    data = gen.blob(tensor)
    stem = os.path.basename(path)[:-3]
    return Expect(stem, dir_names([stem])[0], [tensor.header["num_weights"]], tensor.header,
                  data, 0, len(data))


def header_of(data, off=0):
    """The header fields as stored at off."""
    names = ("magic", "version", "nm_n", "nm_m", "num_weights", "num_mask_bytes",
             "weights_offset", "masks_offset", "precision")
    return dict(zip(names, struct.unpack_from("<IIIIQQQQB", data, off)))


def expects_from_tbm(path, first=None):
    """The expectation of every tensor of a container file, parsed from its bytes alone (for
    models written by the generator's CLI); of the first `first` only when given (a model of
    many tensors: each Expect computes its views)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<I", data, len(data) - 4)
    start = len(data) - 4 - n
    entries = json.loads(data[start: len(data) - 4])["tensors"]
    dirs = dir_names([e["name"] for e in entries])
    return [Expect(e["name"], d, e.get("shape"), header_of(data, e["offset"]), data, e["offset"],
                   start, e) for e, d in list(zip(entries, dirs))[:first]]


def cli_llama(tmp, name="llama.tbm", *args):
    """Runs the generator's CLI for its llama model; the path written."""
    path = os.path.join(tmp, name)
    subprocess.run(["/usr/bin/python3", GEN, "llama", path] + list(args), check=True,
                   timeout=120)
    return path
