"""Reference answers for the integration tests, computed with NumPy from the bytes the
generator wrote and the rules of docs/MOUNT_LAYOUT.md, never from the daemon."""

import ast
import math
import struct

import numpy as np

HEADER_SIZE = 4096
ELEM_SIZE = {0: 4, 1: 2, 2: 2, 3: 8}
DTYPE_NAMES = {0: "fp32", 1: "fp16", 2: "bf16", 3: "fp64"}
BITS = {0: np.dtype("<u4"), 1: np.dtype("<u2"), 2: np.dtype("<u2"), 3: np.dtype("<u8")}
TENSOR_FILES = {"raw.tb", "header.json", "weights.bin", "mask.bin", "dense.f32", "dense.npy",
                "selftest", "stats.json", "mask.png", "weights.png"}
# The root of a llama or mistral model; config.json is there for those alone [v2].
ROOT_FILES = {"index.json", "model.json", "selftest", "tensors.json", "model.safetensors",
              "config.json", "tensors"}


def root_files(arch):
    """The root's names for a model of architecture arch (None when it has none)."""
    return ROOT_FILES if arch in ("llama", "mistral") else ROOT_FILES - {"config.json"}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _units(name_bytes):
    """The encoded name as a list of indivisible pieces: %XX escapes and whole UTF-8
    characters (a stray byte that starts no character is its own piece)."""
    units = []
    i = 0
    while i < len(name_bytes):
        c = name_bytes[i]
        if c == 0x25 or c == 0x2F or c < 0x20 or c == 0x7F:
            units.append(b"%%%02X" % c)
            i += 1
            continue
        size = 1
        if c >= 0xF0:
            size = 4
        elif c >= 0xE0:
            size = 3
        elif c >= 0xC0:
            size = 2
        units.append(name_bytes[i: i + size])
        i += size
    return units


def encode_name(name):
    """Directory name of a tensor name (str), before duplicate suffixes, as bytes."""
    raw = name.encode("utf-8")
    if raw in (b"", b".", b".."):
        return b"".join(b"%%%02X" % c for c in raw) or b"%"
    units = _units(raw)
    enc = b"".join(units)
    if len(enc) <= 255:
        return enc
    cut = b""
    for u in units:
        if len(cut) + len(u) > 246:
            break
        cut += u
    return cut + b"~" + ("%016x" % fnv1a64(raw))[:8].encode()


def dir_names(names):
    """Directory names of an index's tensor names, in index order, with ~2, ~3... suffixes."""
    taken = set()
    out = []
    for name in names:
        enc = encode_name(name)
        cand = enc
        k = 2
        while cand in taken:
            cand = enc + b"~%d" % k
            k += 1
        taken.add(cand)
        out.append(cand)
    return out


def mask_word_bytes(m):
    return 1 if m <= 8 else 2 if m <= 16 else 4


def mask_layout(h):
    """How a mask of header h is read, per the contract [v2], first match wins: (bytes per
    group, groups stored), or None when it is unusable. 1) the format's words for every group;
    2) one byte per group for 9 <= M <= 32; 3) when num_weights is not a multiple of M, either
    layout one group short."""
    m, n, nw, nmb = h["nm_m"], h["nm_n"], h["num_weights"], h["num_mask_bytes"]
    if not (0 < m <= 32 and n <= m):
        return None
    groups, full, b = -(-nw // m), nw // m, mask_word_bytes(m)
    tries = [(b, groups), (1, groups) if m >= 9 else None]
    if full < groups:
        tries += [(b, full), (1, full) if m >= 9 else None]
    for t in tries:
        if t is not None and nmb == t[0] * t[1]:
            return t
    return None


def mask_usable(h):
    return h["nm_m"] == 0 or mask_layout(h) is not None


def keep_bits(mask, m, nw, layout=None):
    """Per-element keep flags (bool, length nw) from a usable mask payload: bit j of group g's
    little-endian word keeps element g*m + j. In the tools' layout (one byte per group) only
    bits 0..7 exist, so positions 8..m-1 are pruned; groups the mask lacks are pruned."""
    b, stored = layout or (mask_word_bytes(m), -(-nw // m))
    groups = -(-nw // m)
    raw = np.frombuffer(mask, dtype=np.uint8)[: stored * b].reshape(stored, b).astype(np.uint64)
    words = np.zeros(groups, dtype=np.uint64)
    for k in range(b):
        words[:stored] |= raw[:, k] << np.uint64(8 * k)
    pos = np.arange(m, dtype=np.uint64)
    bits = ((words[:, None] >> pos) & np.uint64(1)).astype(bool)
    return bits.reshape(-1)[:nw]


def to_f32_bits(prec, weights):
    """float32 bit patterns of stored elements, per the contract: fp32 as is, bf16 shifted,
    fp16 exact with signalling NaNs quieted, fp64 rounded to nearest even with NaNs quieted and
    their payload's top 23 bits kept."""
    raw = np.frombuffer(weights, dtype=BITS[prec])
    if prec == 0:
        return raw.astype(np.uint32)
    if prec == 2:
        return raw.astype(np.uint32) << np.uint32(16)
    if prec == 1:
        sign = (raw.astype(np.uint32) & 0x8000) << 16
        frac = raw.astype(np.uint32) & 0x3FF
        nan = ((raw & 0x7C00) == 0x7C00) & (frac != 0)
        exact = raw.view("<f2").astype(np.float32).view(np.uint32)
        return np.where(nan, sign | np.uint32(0x7FC00000) | (frac << 13), exact).astype(np.uint32)
    sign = ((raw >> np.uint64(32)) & np.uint64(0x80000000)).astype(np.uint32)
    frac = raw & np.uint64((1 << 52) - 1)
    nan = ((raw & np.uint64(0x7FF0000000000000)) == np.uint64(0x7FF0000000000000)) & (frac != 0)
    top = (frac >> np.uint64(29)).astype(np.uint32)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = raw.view("<f8").astype(np.float32).view(np.uint32)
    return np.where(nan, sign | np.uint32(0x7FC00000) | top, rounded).astype(np.uint32)


def nonzero_value(prec, weights):
    raw = np.frombuffer(weights, dtype=BITS[prec])
    sign = {0: 0x7FFFFFFF, 1: 0x7FFF, 2: 0x7FFF, 3: 0x7FFFFFFFFFFFFFFF}[prec]
    return (raw & raw.dtype.type(sign)) != 0


class Expect:
    """What every view of one tensor must show, from the header fields h as written and the
    bytes of the file the blob lives in (data) at blob offset off; limit ends the blob's room
    (the index start in a container, the file size otherwise)."""

    def __init__(self, name, dirname, shape, h, data, off, limit, index_entry=None):
        self.name, self.dir, self.shape, self.h, self.off = name, dirname, shape, h, off
        self.index_entry = index_entry
        self.duplicate = False  # another tensor has the same name: a warning [v2]
        self.problem = False
        self.weights = self.mask = self.raw = self.dense_bits = None
        self.stats = None
        es = ELEM_SIZE.get(h["precision"])
        nw, nmb = h["num_weights"], h["num_mask_bytes"]
        wo, mo = h["weights_offset"], h["masks_offset"]
        if es is None or h["magic"] != 0x31304254 or h["version"] != 1:
            self.problem = True
            return
        if off + HEADER_SIZE > limit:
            self.problem = True
            return
        wend, mend = wo + nw * es, mo + nmb
        if max(off + wend, off + mend) >= 1 << 64:
            self.problem = True
            return
        w_ok = wo >= HEADER_SIZE and off + wend <= limit
        m_ok = mo >= HEADER_SIZE and off + mend <= limit
        self.problem = not (w_ok and m_ok and mask_usable(h))
        if w_ok:
            self.weights = data[off + wo: off + wend]
        if m_ok:
            self.mask = data[off + mo: off + mend]
        if not (w_ok and m_ok):
            return
        self.raw = data[off: off + max(HEADER_SIZE, wend, mend)]
        bits = to_f32_bits(h["precision"], self.weights)
        if h["nm_m"] == 0:
            self.stats = (nw, 1.0, 0, 0)
        elif mask_usable(h):
            keep = keep_bits(self.mask, h["nm_m"], nw, mask_layout(h))
            bits = np.where(keep, bits, np.uint32(0)).astype(np.uint32)
            self.stats = self._mask_stats(keep, h)
        self.dense_bits = bits

    @property
    def warn(self):
        """Whether the contract calls for a warning: mask counters, index fields that differ
        from the header, or a shape whose product is not num_weights."""
        h, e = self.h, self.index_entry or {}
        if self.duplicate:
            return True
        lay = mask_layout(h) if h["nm_m"] else None
        if lay and lay != (mask_word_bytes(h["nm_m"]), -(-h["num_weights"] // h["nm_m"])):
            return True  # a layout of the Tensorbit tools [v2]
        if self.stats is not None and (self.stats[2] or self.stats[3]):
            return True
        header_view = dict(h, dtype=DTYPE_NAMES.get(h["precision"]))
        if any(k in e and e[k] != header_view[k]
               for k in ("dtype", "num_weights", "num_mask_bytes", "nm_n", "nm_m")):
            return True
        return self.shape is not None and math.prod(self.shape) != h["num_weights"]

    def _mask_stats(self, keep, h):
        m, n, nw = h["nm_m"], h["nm_n"], h["num_weights"]
        groups = -(-nw // m)
        padded = np.zeros(groups * m, dtype=np.int64)
        padded[:nw] = keep
        over = int((padded.reshape(groups, m).sum(axis=1) > n).sum())
        kept = int(keep.sum())
        conflicts = int((~keep & nonzero_value(h["precision"], self.weights)).sum())
        return (kept, kept / nw if nw else 0.0, over, conflicts)

    @property
    def dense(self):
        return None if self.dense_bits is None else self.dense_bits.astype("<u4").tobytes()

    def npy_shape(self):
        nw = self.h["num_weights"]
        if self.shape is not None and math.prod(self.shape) == nw:
            return tuple(self.shape)
        return (nw,)


def parse_npy(data):
    """(header dict, header length, payload) of an NPY 1.0 file; raises ValueError if it is not
    one as NumPy writes it: magic, version 1.0, header padded with spaces to a multiple of 64
    ending in a newline."""
    if data[:6] != b"\x93NUMPY":
        raise ValueError("bad NPY magic %r" % data[:6])
    if data[6:8] != b"\x01\x00":
        raise ValueError("NPY version %r, want 1.0" % data[6:8])
    (hlen,) = struct.unpack("<H", data[8:10])
    total = 10 + hlen
    text = data[10:total]
    if total % 64 or not text.endswith(b"\n"):
        raise ValueError("NPY header length %d not 64-aligned or not ending in a newline" % total)
    if not text.rstrip(b"\n").rstrip(b" ").endswith(b"}"):
        raise ValueError("NPY header %r not a padded dict literal" % text)
    return ast.literal_eval(text.decode("latin1")), total, data[total:]


def mark_duplicates(expects):
    """Marks the expectations of tensors whose name another tensor has too."""
    count = {}
    for e in expects:
        count[e.name] = count.get(e.name, 0) + 1
    for e in expects:
        e.duplicate = count[e.name] > 1
    return expects
