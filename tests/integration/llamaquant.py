"""llama.cpp's own quantizer as an oracle for the tests: llama_model_quantize of the libllama
that npm's node-llama-cpp ships (release v0.4.0), called through ctypes with
LLAMA_FTYPE_MOSTLY_Q4_K_M and the defaults of llama_model_quantize_default_params (no
importance matrix), as docs/MOUNT_LAYOUT.md's model.Q4_K_M.gguf is defined; and a reader of
the GGUF files it writes.

    import llamaquant
    if llamaquant.library() is None: ...skip...
    log = llamaquant.quantize("model.gguf", "model.Q4_K_M.gguf")   # raises QuantizeError
    g = llamaquant.read_gguf(open("model.Q4_K_M.gguf", "rb").read())

quantize() runs the quantizer in a child process (this file run as a script), so that
llama.cpp's state, its log lines (returned) and any crash stay out of the test's process.
TBMFS_LLAMA_DIR moves the installation (default /opt/tbmfs-test/llama, where
scripts/install-deps.sh puts it)."""

import ctypes
import glob
import os
import struct
import subprocess
import sys

LLAMA_DIR = os.environ.get("TBMFS_LLAMA_DIR", "/opt/tbmfs-test/llama")
BINS = os.path.join(LLAMA_DIR, "node_modules", "@node-llama-cpp", "linux-x64", "bins",
                    "linux-x64")
Q4_K_M = 15  # enum llama_ftype: LLAMA_FTYPE_MOSTLY_Q4_K_M

# ggml types: (name, elements per block, bytes per block)
GGML_TYPES = {0: ("f32", 1, 4), 1: ("f16", 1, 2), 6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24),
              8: ("q8_0", 32, 34), 12: ("q4_K", 256, 144), 13: ("q5_K", 256, 176),
              14: ("q6_K", 256, 210), 30: ("bf16", 1, 2)}


class QuantizeError(Exception):
    pass


class Params(ctypes.Structure):
    """struct llama_model_quantize_params of the release's include/llama.h."""
    _fields_ = [("nthread", ctypes.c_int32),
                ("ftype", ctypes.c_int),                 # enum llama_ftype
                ("output_tensor_type", ctypes.c_int),    # enum ggml_type
                ("token_embedding_type", ctypes.c_int),  # enum ggml_type
                ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool),
                ("only_copy", ctypes.c_bool),
                ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool),
                ("dry_run", ctypes.c_bool),
                ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p),
                ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p),
                ("max_buf_size", ctypes.c_size_t)]


def library():
    """Path of node-llama-cpp's libllama, or None when it is not installed."""
    found = sorted(glob.glob(os.path.join(BINS, "libllama.v*.so")))
    return found[-1] if found else None


def quantize(src, dst, ftype=Q4_K_M, nthread=0, timeout=600):
    """llama_model_quantize(src, dst) with ftype and the default parameters otherwise (nthread
    0: every CPU); returns llama.cpp's log. QuantizeError when it fails or writes nothing."""
    if library() is None:
        raise QuantizeError("node-llama-cpp's libllama is not installed under %s" % BINS)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), str(src), str(dst),
                        str(ftype), str(nthread)], capture_output=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    log = (p.stdout + p.stderr).decode(errors="replace")
    if p.returncode != 0 or not os.path.isfile(dst):
        raise QuantizeError("llama_model_quantize(%s) failed (exit %d): %s"
                            % (src, p.returncode, log[-1500:]))
    return log


def _run(src, dst, ftype, nthread):
    lib = ctypes.CDLL(library())
    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                         ctypes.POINTER(Params)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    params = lib.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthread
    return lib.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(params))


# --- a GGUF reader (ggml-org/ggml docs/gguf.md, version 3) ---

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}


class Gguf:
    """A parsed GGUF file: kvs is [(key, value type, value, raw bytes of type and value)] in
    file order (an array's value is (element type, [values])), tensors [{"name", "ne", "type",
    "offset"}] in file order, data_start the offset of the data section, data the file's
    bytes."""

    def __init__(self, data):
        self.data = data
        self.pos = 0
        magic, self.version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
        if magic != b"GGUF":
            raise ValueError("not a GGUF file")
        self.pos = 24
        self.kvs = []
        for _ in range(n_kv):
            key = self._str()
            start = self.pos
            vtype = self._u32()
            value = self._value(vtype)
            self.kvs.append((key, vtype, value, data[start:self.pos]))
        self.tensors = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = list(struct.unpack_from("<%dQ" % n_dims, data, self.pos))
            self.pos += 8 * n_dims
            ttype, offset = struct.unpack_from("<IQ", data, self.pos)
            self.pos += 12
            self.tensors.append({"name": name, "ne": ne, "type": ttype, "offset": offset})
        align = self.kv("general.alignment", 32)
        self.data_start = -(-self.pos // align) * align

    def _u32(self):
        v = struct.unpack_from("<I", self.data, self.pos)[0]
        self.pos += 4
        return v

    def _str(self):
        n = struct.unpack_from("<Q", self.data, self.pos)[0]
        s = self.data[self.pos + 8:self.pos + 8 + n].decode()
        self.pos += 8 + n
        return s

    def _value(self, vtype):
        if vtype == 8:
            return self._str()
        if vtype == 9:
            etype = self._u32()
            n = struct.unpack_from("<Q", self.data, self.pos)[0]
            self.pos += 8
            return (etype, [self._value(etype) for _ in range(n)])
        fmt = _SCALARS[vtype]
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def kv(self, key, default=None):
        return next((v for k, _, v, _ in self.kvs if k == key), default)

    def tensor_bytes(self, t):
        """The bytes of tensor t (one of self.tensors), padding left out."""
        _, elems, size = GGML_TYPES[t["type"]]
        n = 1
        for d in t["ne"]:
            n *= d
        start = self.data_start + t["offset"]
        return self.data[start:start + n // elems * size]


def read_gguf(data):
    return Gguf(data)


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
