#!/usr/bin/python3
"""Deterministic generator of Tensorbit models (.tbm containers, manifest directories, bare .tb
files) for the README demo, the benchmarks and the integration tests, including broken ones.

As a module: make_tensor() builds a Tensor spec, blob() turns it into .tb bytes, container(),
write_manifest() and write_tb() write models. Every edge case is a knob of make_tensor() or of the
writers. As a CLI: see `gen_model.py -h`.
"""

import argparse
import json
import os
import struct
import sys
from dataclasses import dataclass, field

import numpy as np

MAGIC = 0x31304254
VERSION = 1
HEADER_SIZE = 4096
PRECISIONS = {"fp32": 0, "fp16": 1, "bf16": 2, "fp64": 3}
PRECISION_NAMES = {code: name for name, code in PRECISIONS.items()}
ELEM_SIZE = {0: 4, 1: 2, 2: 2, 3: 8}
# Stored elements are handled as raw little-endian bit patterns so that NaN payloads survive.
BITS_DTYPE = {0: np.dtype("<u4"), 1: np.dtype("<u2"), 2: np.dtype("<u2"), 3: np.dtype("<u8")}
HEADER_FMT = "<IIIIQQQQB"
DELETE = object()  # index override value that removes the key from the entry

# Bit patterns worth storing for each precision: NaNs with payloads, signalling NaNs,
# infinities, subnormals, -0.0, extremes, and (fp64) round-to-nearest-even ties.
SPECIAL_VALUES = {
    "fp32": [0x7FC00001, 0xFFC12345, 0x7F800001, 0x7FA00000, 0xFF812345, 0x7F800000, 0xFF800000,
             0x00000001, 0x007FFFFF, 0x80000001, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000,
             0x3F800000, 0xBF800000],
    "fp16": [0x7E01, 0xFE3F, 0x7C01, 0x7D55, 0xFC01, 0x7C00, 0xFC00, 0x0001, 0x03FF, 0x8001,
             0x8000, 0x7BFF, 0xFBFF, 0x0400, 0x3C00, 0xBC00],
    "bf16": [0x7FC1, 0xFFC0, 0x7F81, 0x7F80 | 0x0055, 0xFF81, 0x7F80, 0xFF80, 0x0001, 0x007F,
             0x8001, 0x8000, 0x7F7F, 0xFF7F, 0x0080, 0x3F80, 0xBF80],
    "fp64": [0x7FF8000000000001, 0x7FF8000020000000, 0xFFFC0000E0000000, 0x7FF0000000000001,
             0x7FF4000000000000, 0xFFF0000020000000, 0x7FF0000000000000, 0xFFF0000000000000,
             0x0000000000000001, 0x380FFFFFFFFFFFFF, 0x36A0000000000000, 0x36A0000000000001,
             0x8000000000000000, 0x3FF0000010000000, 0x3FF0000030000000, 0x47EFFFFFF0000000,
             0x47EFFFFFEFFFFFFF, 0x4E8E3BC4A6D5C7E0, 0xC7EFFFFFF0000000, 0x3FF0000000000000],
}


def mask_word_bytes(m):
    """Bytes of one group's mask word for group size m (4 past 32, where the rules stop)."""
    return 1 if m <= 8 else 2 if m <= 16 else 4


def mask_size(num_weights, m):
    """num_mask_bytes of a usable mask: ceil(num_weights / m) * B; 0 for a dense tensor."""
    if m == 0:
        return 0
    return -(-num_weights // m) * mask_word_bytes(m)


@dataclass
class Tensor:
    """One tensor as it will be stored: its payloads and every header and index field.

    header holds the 4096-byte header's fields; they describe the payloads unless a case
    overrides them. weights and mask are the payload bytes, laid out after the header in that
    order (gap bytes between them when masks_offset says so). index holds the index entry as it
    will be written (offset or file filled in by the writer unless given)."""

    name: str
    shape: list
    header: dict
    weights: bytes
    mask: bytes
    index: dict
    reserved: bytes = b""
    tail: bytes = b""
    extra: dict = field(default_factory=dict)

    def header_bytes(self):
        h = self.header
        head = struct.pack(HEADER_FMT, h["magic"], h["version"], h["nm_n"], h["nm_m"],
                           h["num_weights"], h["num_mask_bytes"], h["weights_offset"],
                           h["masks_offset"], h["precision"])
        body = head + self.reserved
        return body + bytes(HEADER_SIZE - len(body))

    def physical_masks_offset(self):
        """Where the mask bytes are physically written: at masks_offset when that lies between
        the end of the weights and a sane distance, else right after the weights."""
        after = HEADER_SIZE + len(self.weights)
        mo = self.header["masks_offset"]
        return mo if after <= mo <= after + (1 << 20) else after


def blob(t):
    """The .tb bytes of t: header, weights at 4096, mask, then t.tail."""
    out = bytearray(t.header_bytes())
    out += t.weights
    mo = t.physical_masks_offset()
    out += bytes(mo - len(out))
    out += t.mask
    out += t.tail
    return bytes(out)


def _bits_to_stored(prec, values):
    """Raw bit patterns of float values in precision prec (bf16 rounds to nearest even)."""
    if prec == 0 or prec not in ELEM_SIZE:
        return np.asarray(values, dtype="<f4").view("<u4")
    if prec == 1:
        return np.asarray(values, dtype="<f2").view("<u2")
    if prec == 3:
        return np.asarray(values, dtype="<f8").view("<u8")
    f = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (f + 0x7FFF + ((f >> 16) & 1)) >> 16
    return rounded.astype("<u2")


def random_values(prec, count, rng, scale=0.05):
    """count random non-zero stored bit patterns of precision prec."""
    v = rng.standard_normal(count, dtype=np.float64) * scale
    v = np.where(np.abs(v) < 1e-3, 1e-3, v)
    return _bits_to_stored(prec, v)


def random_mask_bits(num_weights, n, m, rng):
    """Per-element keep bits (bool, length groups*m): n random kept positions in every group,
    and in a partial last group min(n, valid) among its valid positions."""
    groups = -(-num_weights // m)
    if groups == 0:
        return np.zeros(0, dtype=bool)
    keys = rng.random((groups, m))
    valid = num_weights - (groups - 1) * m
    keys[-1, valid:] = 2.0  # never picked: positions past the last element
    order = np.argsort(keys, axis=1, kind="stable")
    bits = np.zeros((groups, m), dtype=bool)
    rows = np.arange(groups)[:, None]
    bits[rows, order[:, :n]] = True
    if valid < m:
        bits[-1, valid:] = False
    return bits.reshape(-1)


def pack_mask(bits, m):
    """Mask payload of per-element keep bits (length groups*m): bit j of group g's LE word."""
    b = mask_word_bytes(m)
    groups = len(bits) // m
    weights = np.uint64(1) << np.arange(m, dtype=np.uint64)
    words = (bits.reshape(groups, m).astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return words.astype("<u8").view(np.uint8).reshape(groups, 8)[:, :b].tobytes()


def _apply_overrides(d, overrides):
    for k, v in (overrides or {}).items():
        if v is DELETE:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def tool_mask(bits, m, short=False):
    """A mask as the Tensorbit tools write it: one byte per group whatever M is (bits 8 and up
    of a group cannot be stored: the tools cast each group's mask to 8 bits), and with short
    the last group left out (the tools' floor instead of ceil)."""
    groups = len(bits) // m
    low = bits.reshape(groups, m)[:, : min(m, 8)].astype(np.uint16)
    out = (low << np.arange(low.shape[1], dtype=np.uint16)).sum(axis=1).astype(np.uint8)
    return out[: groups - 1 if short else groups].tobytes()


def make_tensor(name, shape, dtype="fp32", nm=(2, 4), seed=0, *, num_weights=None, values=None,
                mask_bits=None, mask_bytes=None, junk_bits=False, over_n=0, conflicts=0,
                prune=True, header=None, index=None, reserved=b"", tail=b"", mask_gap=0,
                tools_mask=False, short_mask=False):
    """A tensor spec with consistent header, payloads and index entry, then the overrides.

    dtype: "fp32" | "fp16" | "bf16" | "fp64", or an int precision code (unknown codes store
    4-byte elements). nm: (N, M); M = 0 is dense. num_weights: element count (default the shape's
    product). values: stored raw bit patterns or floats (default random, seeded). mask_bits:
    per-element keep bits (default n random kept per group). mask_bytes: the mask payload as is.
    junk_bits: set every mask bit at positions >= M and past the last element. over_n: that many
    groups get every bit set. conflicts: that many pruned elements keep a non-zero stored value.
    prune=False stores every value (for masks that must not be applied). header / index: field
    overrides (DELETE removes an index key). mask_gap: bytes between weights and mask.
    tools_mask: the mask as the Tensorbit tools write it (one byte per group, positions 8..M-1
    pruned); short_mask: one group short of a partial last group, that group pruned (either
    layout).
    """
    n, m = nm
    prec = PRECISIONS[dtype] if isinstance(dtype, str) else int(dtype)
    nw = int(np.prod(shape, dtype=np.int64)) if num_weights is None else num_weights
    rng = np.random.default_rng([seed, 0x7B])
    bits_dtype = BITS_DTYPE.get(prec, np.dtype("<u4"))
    if values is None:
        stored = random_values(prec, nw, rng)
    elif np.asarray(values).dtype.kind in "ui":
        stored = np.asarray(values)
    else:
        stored = _bits_to_stored(prec, values)
    stored = np.array(stored, dtype=bits_dtype)  # a writable copy: pruning zeroes elements
    mask = b""
    if m > 0:
        groups = -(-nw // m)
        if mask_bits is None and mask_bytes is None:
            # N > M cannot be honoured: keep half of each group so that applying it shows.
            bits = random_mask_bits(nw, n if n <= m else max(1, m // 2), m, rng)
            if over_n:
                chosen = rng.choice(groups - (1 if nw % m else 0), size=over_n, replace=False)
                bits.reshape(groups, m)[chosen, :] = True
        elif mask_bits is not None:
            bits = np.zeros(groups * m, dtype=bool)
            bits[: len(mask_bits)] = np.asarray(mask_bits, dtype=bool)
        if tools_mask or short_mask:
            # what the tools cannot store is pruned, and so zeroed below
            if tools_mask and m > 8:
                bits.reshape(groups, m)[:, 8:] = False
            if short_mask:
                bits[(groups - 1) * m:] = False
        if mask_bytes is not None:
            mask = bytes(mask_bytes)
            bits = _unpack_bits(mask, m, nw) if m <= 32 else np.ones(groups * m, dtype=bool)
        elif tools_mask:
            mask = tool_mask(bits, m, short_mask)
        else:
            mask = pack_mask(bits, m)
            if junk_bits:
                mask = _with_junk_bits(mask, m, nw)
            if short_mask:
                mask = mask[: (groups - 1) * mask_word_bytes(m)]
        keep = bits[:nw]
        if prune and m <= 32 and n <= m:
            pruned = np.flatnonzero(~keep)
            stored[pruned] = 0
            if conflicts:
                pick = pruned[rng.choice(len(pruned), size=conflicts, replace=False)]
                stored[pick] = random_values(prec, conflicts, rng)
    weights = stored.tobytes()
    hdr = {
        "magic": MAGIC, "version": VERSION, "nm_n": n, "nm_m": m, "num_weights": nw,
        "num_mask_bytes": len(mask), "weights_offset": HEADER_SIZE,
        "masks_offset": HEADER_SIZE + len(weights) + mask_gap, "precision": prec,
    }
    _apply_overrides(hdr, header)
    entry = {"name": name, "shape": list(shape), "nm_n": n, "nm_m": m,
             "dtype": PRECISION_NAMES.get(prec, "fp32"), "num_weights": nw,
             "num_mask_bytes": len(mask)}
    _apply_overrides(entry, index)
    return Tensor(name=name, shape=list(shape), header=hdr, weights=weights, mask=mask,
                  index=entry, reserved=reserved, tail=tail,
                  extra={"index_overrides": dict(index or {})})


def _unpack_bits(mask, m, nw):
    b = mask_word_bytes(m)
    groups = -(-nw // m)
    raw = np.frombuffer(mask[: groups * b].ljust(groups * b, b"\0"), dtype=np.uint8)
    words = np.zeros(groups, dtype=np.uint64)
    for k in range(b):
        words |= raw[k::b].astype(np.uint64) << np.uint64(8 * k)
    return ((words[:, None] >> np.arange(m, dtype=np.uint64)) & np.uint64(1)).astype(bool).ravel()


def _with_junk_bits(mask, m, nw):
    """Sets every bit that means nothing: positions >= M in each word, and positions past the
    last element in the partial last group."""
    b = mask_word_bytes(m)
    groups = len(mask) // b
    words = np.frombuffer(mask, dtype=np.uint8).reshape(groups, b).astype(np.uint64)
    word = (words << (np.arange(b, dtype=np.uint64) * np.uint64(8))).sum(axis=1, dtype=np.uint64)
    full = np.uint64((1 << (8 * b)) - 1)
    junk = full & ~np.uint64((1 << m) - 1)
    word |= junk
    valid = nw - (groups - 1) * m
    if valid < m:
        word[-1] |= np.uint64(((1 << m) - 1) & ~((1 << valid) - 1))
    return word.astype("<u8").view(np.uint8).reshape(groups, 8)[:, :b].tobytes()


def special_tensor(name, dtype, nm=(0, 0)):
    """A tensor whose stored values are SPECIAL_VALUES[dtype], every one kept by its mask."""
    vals = np.array(SPECIAL_VALUES[dtype], dtype=BITS_DTYPE[PRECISIONS[dtype]])
    keep = np.ones(len(vals), dtype=bool) if nm[1] else None
    return make_tensor(name, [len(vals)], dtype, nm, values=vals, mask_bits=keep)


@dataclass
class Container:
    data: bytes
    index_bytes: bytes
    index_start: int
    offsets: list
    entries: list


def container(tensors, architecture="llama", config=None, *, offsets=None, index_obj=None,
              index_bytes=None, index_len=None):
    """A .tbm container: the blobs (back to back, or at offsets[i]; a later blob overwrites an
    earlier one where they overlap), then the JSON index, its 4-byte LE length.

    Each entry's "offset" is the blob's offset unless the tensor's index overrides it.
    index_obj replaces the whole index object, index_bytes its serialized bytes, index_len the
    length word."""
    data = bytearray()
    placed = []
    for i, t in enumerate(tensors):
        b = blob(t)
        off = offsets[i] if offsets is not None else len(data)
        if len(data) < off + len(b):
            data += bytes(off + len(b) - len(data))
        data[off: off + len(b)] = b
        placed.append(off)
    entries = []
    for t, off in zip(tensors, placed):
        e = {"name": t.name, "offset": off}
        e.update(t.index)
        entries.append(_apply_overrides(e, t.extra.get("index_overrides")))
    if index_obj is None:
        index_obj = {"architecture": architecture, "config": config or {}, "tensors": entries}
    if index_bytes is None:
        index_bytes = json.dumps(index_obj, indent=1, ensure_ascii=False).encode("utf-8")
    start = len(data)
    length = len(index_bytes) if index_len is None else index_len
    data += index_bytes + struct.pack("<I", length & 0xFFFFFFFF)
    return Container(bytes(data), index_bytes, start, placed, entries)


def merged_container(tensors, architecture="custom", config=None):
    """A container as the Tensorbit merge script (merge_tbm.py) writes it: the blobs back to
    back, but each index offset computed as if every blob before were fp32, 4096 + 4 *
    num_weights + num_mask_bytes: every blob after the first that is not fp32 is elsewhere
    than its index says. Returns the Container; its offsets are where the blobs really are."""
    cont = container(tensors, architecture, config)
    claimed, off = [], 0
    for t in tensors:
        claimed.append(off)
        off += HEADER_SIZE + 4 * t.header["num_weights"] + t.header["num_mask_bytes"]
    entries = [dict(e, offset=c) for e, c in zip(cont.entries, claimed)]
    obj = {"architecture": architecture, "config": config or {}, "tensors": entries}
    index_bytes = json.dumps(obj, indent=1, ensure_ascii=False).encode("utf-8")
    data = cont.data[: cont.index_start] + index_bytes + struct.pack("<I", len(index_bytes))
    return Container(data, index_bytes, cont.index_start, cont.offsets, entries)


def write_file(path, data, mtime=None):
    with open(path, "wb") as f:
        f.write(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def write_tb(path, tensor, mtime=None):
    """A bare .tb file holding tensor's blob."""
    write_file(path, blob(tensor), mtime)


def manifest_entry(t, fname):
    """t's manifest entry: name, file, shape, nm_n, nm_m, dtype as in the format's example,
    plus any other index key the tensor's overrides set (DELETE removes one)."""
    e = {"name": t.name, "file": fname}
    e.update({k: t.index[k] for k in ("shape", "nm_n", "nm_m", "dtype") if k in t.index})
    overrides = t.extra.get("index_overrides") or {}
    e.update({k: v for k, v in overrides.items() if k != "offset"})
    return _apply_overrides(e, {k: v for k, v in overrides.items() if v is DELETE})


def write_manifest(directory, tensors, architecture="llama", config=None, *, special=None,
                   manifest_bytes=None, mtime=None):
    """A manifest directory: manifest.json and one .tb file per tensor (t<i>.tb).

    special maps a tensor's position to how its file is made: "absolute" (file outside the
    directory, named by an absolute path), "dotdot" (sub/../t<i>.tb, resolving inside),
    "dotdot_out" (../<dir>.t<i>.tb, outside), "symlink_out" (t<i>.tb links to a file outside),
    "symlink_in" (t<i>.tb links to real/t<i>.tb), "fifo", "dir", "missing" (no file). Files made
    outside are written beside the directory. manifest_bytes replaces manifest.json's content.
    Returns the manifest's bytes."""
    os.makedirs(directory, exist_ok=True)
    special = special or {}
    parent = os.path.dirname(os.path.abspath(directory))
    base = os.path.basename(os.path.abspath(directory))
    entries = []
    for i, t in enumerate(tensors):
        fname = "t%d.tb" % i
        kind = special.get(i, "regular")
        local = os.path.join(directory, fname)
        outside = os.path.join(parent, "%s.t%d.tb" % (base, i))
        if kind == "regular":
            write_tb(local, t)
        elif kind == "absolute":
            write_tb(outside, t)
            fname = outside
        elif kind == "dotdot":
            os.makedirs(os.path.join(directory, "sub"), exist_ok=True)
            write_tb(local, t)
            fname = "sub/../" + fname
        elif kind == "dotdot_out":
            write_tb(outside, t)
            fname = "../" + os.path.basename(outside)
        elif kind == "symlink_out":
            write_tb(outside, t)
            os.symlink(outside, local)
        elif kind == "symlink_in":
            os.makedirs(os.path.join(directory, "real"), exist_ok=True)
            write_tb(os.path.join(directory, "real", fname), t)
            os.symlink(os.path.join("real", fname), local)
        elif kind == "fifo":
            os.mkfifo(local)
        elif kind == "dir":
            os.mkdir(local)
        elif kind != "missing":
            raise ValueError("unknown manifest file kind %r" % kind)
        entries.append(manifest_entry(t, fname))
    obj = {"architecture": architecture, "config": config or {}, "tensors": entries}
    if manifest_bytes is None:
        manifest_bytes = json.dumps(obj, indent=1, ensure_ascii=False).encode("utf-8")
    write_file(os.path.join(directory, "manifest.json"), manifest_bytes)
    if mtime is not None:
        os.utime(directory, (mtime, mtime))
    return manifest_bytes


# ---- CLI models -------------------------------------------------------------------------------

def llama_tensors(seed=0, layers=2, hidden=256, heads=4, kv_heads=2, intermediate=688,
                  vocab=1000, arch="llama", head_dim=None):
    """A small llama-like model: dense fp16 embedding, fp32 norms, per layer q/k/v/o (fp32/bf16)
    and gate/up/down (fp16) projections at 2:4, and a 2:4 bf16 lm_head. arch "qwen2" adds fp32
    q/k/v biases, "qwen3" fp32 q/k head norms and head_dim (config "head_dim" when given)."""
    given_head_dim = head_dim if arch == "qwen3" else None
    head_dim = given_head_dim or hidden // heads
    config = {"hidden_size": hidden, "num_heads": heads, "num_kv_heads": kv_heads,
              "intermediate_size": intermediate, "vocab_size": vocab, "num_layers": layers,
              "max_seq_len": 2048, "norm_eps": 1e-06, "rope_theta": 10000.0}
    if given_head_dim:
        config["head_dim"] = given_head_dim
    specs = [("model.embed_tokens.weight", [vocab, hidden], "fp16", (0, 0))]
    for i in range(layers):
        p = "model.layers.%d." % i
        specs += [
            (p + "self_attn.q_proj.weight", [heads * head_dim, hidden], "fp32", (2, 4)),
            (p + "self_attn.k_proj.weight", [kv_heads * head_dim, hidden], "bf16", (2, 4)),
            (p + "self_attn.v_proj.weight", [kv_heads * head_dim, hidden], "bf16", (2, 4)),
            (p + "self_attn.o_proj.weight", [hidden, heads * head_dim], "fp32", (2, 4)),
            (p + "mlp.gate_proj.weight", [intermediate, hidden], "fp16", (2, 4)),
            (p + "mlp.up_proj.weight", [intermediate, hidden], "fp16", (2, 4)),
            (p + "mlp.down_proj.weight", [hidden, intermediate], "fp16", (2, 4)),
            (p + "input_layernorm.weight", [hidden], "fp32", (0, 0)),
            (p + "post_attention_layernorm.weight", [hidden], "fp32", (0, 0)),
        ]
        if arch == "qwen2":
            specs += [(p + "self_attn.%s_proj.bias" % w, [n * head_dim], "fp32", (0, 0))
                      for w, n in (("q", heads), ("k", kv_heads), ("v", kv_heads))]
        elif arch == "qwen3":
            specs += [(p + "self_attn.%s_norm.weight" % w, [head_dim], "fp32", (0, 0))
                      for w in ("q", "k")]
    specs += [("model.norm.weight", [hidden], "fp32", (0, 0)),
              ("lm_head.weight", [vocab, hidden], "bf16", (2, 4))]
    tensors = []
    for k, (name, shape, dtype, nm) in enumerate(specs):
        values = None
        if name.endswith("norm.weight"):
            values = 1.0 + np.random.default_rng([seed, k]).standard_normal(shape[0]) * 0.01
        tensors.append(make_tensor(name, shape, dtype, nm, seed * 100003 + k, values=values))
    return tensors, config


def many_tensors(count, numel=16, dtype="fp16", nm=(2, 4), seed=0):
    """count tiny tensors "blk.<i>.weight" of numel elements, sharing one random payload."""
    base = make_tensor("blk", [numel], dtype, nm, seed)
    out = []
    for i in range(count):
        name = "blk.%d.weight" % i
        index = dict(base.index, name=name)
        out.append(Tensor(name, list(base.shape), base.header, base.weights, base.mask, index))
    return out


def _stream_tensor(f, start, name, shape, dtype, n, m, seed, chunk_groups=1 << 16):
    """Writes one large tensor's blob at file offset start without holding it in memory;
    returns its index entry. Chunk c's values and mask come from rng([seed, c])."""
    prec = PRECISIONS[dtype]
    nw = int(np.prod(shape, dtype=np.int64))
    es = ELEM_SIZE[prec]
    nmb = mask_size(nw, m)
    wo = HEADER_SIZE
    mo = wo + nw * es
    hdr = struct.pack(HEADER_FMT, MAGIC, VERSION, n, m, nw, nmb, wo, mo, prec)
    f.seek(start)
    f.write(hdr + bytes(HEADER_SIZE - len(hdr)))
    per = (m or 16) * chunk_groups
    for c, first in enumerate(range(0, nw, per)):
        count = min(per, nw - first)
        rng = np.random.default_rng([seed, c])
        stored = random_values(prec, count, rng)
        if m:
            bits = random_mask_bits(count, n, m, rng)
            stored[~bits[:count]] = 0
            f.seek(start + mo + (first // m) * mask_word_bytes(m))
            f.write(pack_mask(bits, m))
        f.seek(start + wo + first * es)
        f.write(stored.tobytes())
    f.seek(start + mo + nmb)
    return {"name": name, "offset": start, "shape": list(shape), "nm_n": n, "nm_m": m,
            "dtype": dtype, "num_weights": nw, "num_mask_bytes": nmb}


def _write_index(f, index_obj):
    raw = json.dumps(index_obj, indent=1, ensure_ascii=False).encode("utf-8")
    f.write(raw + struct.pack("<I", len(raw)))


def _cli_tensor(args):
    shape = [int(x) for x in args.shape.split(",")]
    n, m = _parse_nm(args.nm)
    name = args.name
    if args.manifest:
        os.makedirs(args.manifest, exist_ok=True)
        with open(os.path.join(args.manifest, "t0.tb"), "wb") as f:
            _stream_tensor(f, 0, name, shape, args.dtype, n, m, args.seed)
        entry = {"name": name, "file": "t0.tb", "shape": shape, "nm_n": n, "nm_m": m,
                 "dtype": args.dtype}
        write_file(os.path.join(args.manifest, "manifest.json"),
                   json.dumps({"architecture": "custom", "config": {}, "tensors": [entry]},
                              indent=1).encode())
        return
    with open(args.out, "wb") as f:
        entry = _stream_tensor(f, 0, name, shape, args.dtype, n, m, args.seed)
        if not args.out.endswith(".tb"):
            _write_index(f, {"architecture": "custom", "config": {}, "tensors": [entry]})


def _write_model(args, tensors, architecture, config):
    if args.manifest:
        write_manifest(args.manifest, tensors, architecture, config)
        return
    if args.out.endswith(".tb"):
        sys.exit("gen_model.py: a bare .tb holds one tensor; use the tensor command")
    with open(args.out, "wb") as f:
        entries = []
        offset = 0
        for t in tensors:
            b = blob(t)
            f.write(b)
            e = {"name": t.name, "offset": offset}
            e.update(t.index)
            entries.append(e)
            offset += len(b)
        _write_index(f, {"architecture": architecture, "config": config, "tensors": entries})


def _parse_nm(text):
    n, m = (int(x) for x in text.split(":"))
    if not (0 <= n <= m <= 32):
        sys.exit("gen_model.py: --nm %s: want N:M with 0 <= N <= M <= 32" % text)
    return n, m


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Write deterministic Tensorbit models (.tbm, manifest directory, bare .tb).",
        epilog="OUT ending in .tb writes a bare .tb (tensor only); any other OUT a .tbm "
               "container. --manifest DIR writes a manifest directory instead of OUT.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--manifest", metavar="DIR", help="write a manifest directory")
    sub = p.add_subparsers(dest="cmd", required=True)
    ll = sub.add_parser("llama", help="small llama-like model, 2:4 projections (--arch qwen2 "
                        "or qwen3 for those)")
    ll.add_argument("--arch", default="llama", choices=["llama", "qwen2", "qwen3"])
    ll.add_argument("--head-dim", type=int, help="qwen3: head_dim (default hidden / heads)")
    ll.add_argument("out", nargs="?", metavar="OUT")
    ll.add_argument("--layers", type=int, default=2)
    ll.add_argument("--hidden", type=int, default=256)
    ll.add_argument("--heads", type=int, default=4)
    ll.add_argument("--kv-heads", type=int, default=2)
    ll.add_argument("--intermediate", type=int, default=688)
    ll.add_argument("--vocab", type=int, default=1000)
    te = sub.add_parser("tensor", help="one big tensor, written in chunks")
    te.add_argument("out", nargs="?", metavar="OUT")
    te.add_argument("--shape", default="4096,4096", help="comma-separated, e.g. 4096,4096")
    te.add_argument("--dtype", default="fp32", choices=sorted(PRECISIONS))
    te.add_argument("--nm", default="2:4", help="N:M, 0:0 for dense")
    te.add_argument("--name", default="big.weight")
    ma = sub.add_parser("many", help="an index of COUNT tiny tensors")
    ma.add_argument("out", nargs="?", metavar="OUT")
    ma.add_argument("--count", type=int, default=100000)
    ma.add_argument("--numel", type=int, default=16)
    ma.add_argument("--dtype", default="fp16", choices=sorted(PRECISIONS))
    ma.add_argument("--nm", default="2:4")
    for sp in (ll, te, ma):
        sp.add_argument("--manifest", metavar="DIR", default=argparse.SUPPRESS,
                        help="write a manifest directory instead of OUT")
    args = p.parse_args(argv)
    if (args.out is None) == (args.manifest is None):
        p.error("give exactly one of OUT and --manifest DIR")
    if args.cmd == "tensor":
        _cli_tensor(args)
    elif args.cmd == "llama":
        tensors, config = llama_tensors(args.seed, args.layers, args.hidden, args.heads,
                                        args.kv_heads, args.intermediate, args.vocab, args.arch,
                                        args.head_dim)
        _write_model(args, tensors, args.arch, config)
    else:
        n, m = _parse_nm(args.nm)
        tensors = many_tensors(args.count, args.numel, args.dtype, (n, m), args.seed)
        _write_model(args, tensors, "custom", {"count": args.count})
    return 0


if __name__ == "__main__":
    sys.exit(main())
