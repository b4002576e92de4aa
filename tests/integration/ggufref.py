"""An independent writer of model.gguf and model.Q8_0.gguf (docs/MOUNT_LAYOUT.md, "llama.cpp
views [v3]", and the qwen2 and qwen3 architectures of v4) from the bytes the generator wrote,
for the tests: the q/k permutation as llama.cpp's converter writes it (a reshape and a swap of
axes), Q8_0 as quantize_row_q8_0_ref does in NumPy; and a NumPy forward pass of the llama
architecture over the same weights."""

import struct

import numpy as np

from tbmref import BITS, keep_bits, mask_layout

F32, F16, Q8_0, BF16 = 0, 1, 8, 30
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}
LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.o_proj.weight": "attn_output.weight",
         "post_attention_layernorm.weight": "ffn_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight"}
# [v4] what qwen2 and qwen3 add per layer
LAYER_EXTRA = {"qwen2": {"self_attn.q_proj.bias": "attn_q.bias",
                         "self_attn.k_proj.bias": "attn_k.bias",
                         "self_attn.v_proj.bias": "attn_v.bias"},
               "qwen3": {"self_attn.q_norm.weight": "attn_q_norm.weight",
                         "self_attn.k_norm.weight": "attn_k_norm.weight"}}


def gguf_arch(arch):
    """general.architecture of a model of architecture arch (any case): mistral is llama."""
    a = arch.lower()
    return "llama" if a == "mistral" else a


def layer_names(arch):
    return dict(LAYER, **LAYER_EXTRA.get(gguf_arch(arch), {}))


def head_size(config, arch):
    hd = config.get("head_dim")
    return hd if gguf_arch(arch) == "qwen3" and hd else config["hidden_size"] // config["num_heads"]


def gguf_names(layers, arch="llama"):
    """{true name: (GGUF name, permuted heads key or None)} of every name llama.cpp expects
    (only llama's q and k rows are permuted)."""
    out = {hf: (g, None) for hf, g in TOP.items()}
    out.update({g: (g, None) for g in TOP.values()})
    permuted = gguf_arch(arch) == "llama"
    for n in range(layers):
        for hf, g in layer_names(arch).items():
            key = {"attn_q.weight": "q", "attn_k.weight": "k"}.get(g) if permuted else None
            out["model.layers.%d.%s" % (n, hf)] = ("blk.%d.%s" % (n, g), key)
            out["blk.%d.%s" % (n, g)] = ("blk.%d.%s" % (n, g), None)
    return out


def permute(w, heads):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute, on rows."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def stored_masked(e):
    """The stored elements of Expect e (raw bits) with the pruned ones +0."""
    h = e.h
    raw = np.frombuffer(e.weights, dtype=BITS[h["precision"]]).copy()
    if h["nm_m"]:
        raw[~keep_bits(e.mask, h["nm_m"], h["num_weights"], mask_layout(h))] = 0
    return raw


def quantize_q8_0(x):
    """Q8_0 blocks of float32 rows x (row length a multiple of 32), as bytes."""
    b = x.reshape(-1, 32).astype(np.float32)
    bad = ~np.isfinite(b).all(axis=1)
    b = np.where(bad[:, None], np.float32(0), b)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
        idv = np.where(np.isinf(idv), np.float32(0), idv)   # x86: an infinite product -> 0
        p = (b * idv[:, None]).astype(np.float32).astype(np.float64)
        q = (np.sign(p) * np.floor(np.abs(p) + 0.5)).astype(np.int8)   # halves away from zero
        dh = d.astype(np.float16).view(np.uint16)
    dh = np.where(bad, np.uint16(0x7E00), dh)
    q[bad] = 0
    out = np.zeros((len(b), 34), dtype=np.uint8)
    out[:, :2] = dh.astype("<u2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(data, shape):
    blk = np.frombuffer(data, dtype=np.uint8).reshape(-1, 34)
    d = blk[:, :2].copy().view("<f2").astype(np.float32)
    q = blk[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(shape)


def _kv_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _kv(key, vtype, payload):
    return _kv_str(key) + struct.pack("<I", vtype) + payload


class Tensor:
    """One tensor of the files: GGUF name, rows x cols (1-D: cols only), the data per file."""

    def __init__(self, e, gname, heads, matrix):
        h = e.h
        self.name, self.e, self.matrix, self.heads = gname, e, matrix, heads
        self.shape = tuple(e.shape)
        prec = h["precision"]
        dense = np.asarray(e.dense_bits, dtype=np.uint32).view(np.float32)
        if matrix:
            dense = dense.reshape(self.shape)
            stored = stored_masked(e).reshape(self.shape)
            if heads:
                dense, stored = permute(dense, heads), permute(stored, heads)
        self.f32 = np.ascontiguousarray(dense, dtype=np.float32)
        if matrix and prec in (0, 1, 2):
            self.native_type = {0: F32, 1: F16, 2: BF16}[prec]
            self.native = np.ascontiguousarray(stored).tobytes()
        else:
            self.native_type, self.native = F32, self.f32.tobytes()
        if matrix and self.shape[1] % 32 == 0:
            self.q8_type, self.q8 = Q8_0, quantize_q8_0(self.f32)
        else:
            self.q8_type, self.q8 = F32, self.f32.tobytes()

    def ne(self):
        return [self.shape[1], self.shape[0]] if self.matrix else [self.shape[0]]


def layout(expects, config, arch="llama"):
    """(tensors that go in, true names left out) per the contract, or None when the model
    cannot be a GGUF."""
    layers = config["num_layers"]
    names = gguf_names(layers, arch)
    heads = {"q": config["num_heads"], "k": config.get("num_kv_heads", config["num_heads"])}
    taken, omitted = [], []
    seen = set()
    for e in expects:
        if e.name not in names:
            omitted.append(e.name)
            continue
        gname, key = names[e.name]
        if gname in seen or e.problem:
            return None
        seen.add(gname)
        matrix = not gname.endswith("norm.weight") and not gname.endswith(".bias")
        taken.append(Tensor(e, gname, heads[key] if key else 0, matrix))
    need = {"token_embd.weight", "output_norm.weight"}
    need |= {"blk.%d.%s" % (n, g) for n in range(layers) for g in layer_names(arch).values()}
    if not need <= seen:
        return None
    return taken, omitted


def write(expects, config, name, q8, arch="llama"):
    """The bytes of model.gguf (q8 False) or model.Q8_0.gguf of the model, or None."""
    lay = layout(expects, config, arch)
    if lay is None:
        return None
    taken, omitted = lay
    c = config
    counts = {F32: 0, F16: 0, BF16: 0}
    for t in taken:
        if t.matrix:
            counts[t.native_type] += t.shape[0] * t.shape[1]
    native_ft = max([(counts[F32], 0, 0), (counts[F16], -1, 1), (counts[BF16], -32, 32)])[2]
    a = gguf_arch(arch)
    kvs = [
        _kv("general.architecture", 8, _kv_str(a)),
        _kv("general.name", 8, _kv_str(name)),
        _kv("general.alignment", 4, struct.pack("<I", 32)),
        _kv("general.file_type", 4, struct.pack("<I", 7 if q8 else native_ft)),
    ]
    if q8:
        kvs.append(_kv("general.quantization_version", 4, struct.pack("<I", 2)))
    hd = head_size(c, arch)
    u32 = [("context_length", c.get("max_seq_len", 2048)),
           ("embedding_length", c["hidden_size"]), ("block_count", c["num_layers"]),
           ("feed_forward_length", c["intermediate_size"]),
           ("attention.head_count", c["num_heads"]),
           ("attention.head_count_kv", c.get("num_kv_heads", c["num_heads"])),
           ("rope.dimension_count", hd)]
    if a == "qwen3":
        u32 += [("attention.key_length", hd), ("attention.value_length", hd)]
    u32.append(("vocab_size", c["vocab_size"]))
    kvs += [_kv(a + "." + k, 4, struct.pack("<I", v)) for k, v in u32]
    kvs += [_kv(a + ".rope.freq_base", 6, struct.pack("<f", c.get("rope_theta", 10000.0))),
            _kv(a + ".attention.layer_norm_rms_epsilon", 6,
                struct.pack("<f", c.get("norm_eps", 1e-5))),
            _kv("tokenizer.ggml.model", 8, _kv_str("none")),
            _kv("tbmfs.omitted", 9, struct.pack("<IQ", 8, len(omitted))
                + b"".join(_kv_str(n) for n in omitted))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(taken), len(kvs)) + b"".join(kvs)
    data = b""
    for t in taken:
        blob, ttype = (t.q8, t.q8_type) if q8 else (t.native, t.native_type)
        ne = t.ne()
        head += _kv_str(t.name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", ttype, len(data))
        data += blob + bytes(-len(blob) % 32)
    head += bytes(-len(head) % 32)
    return head + data


def weights_of(expects, config, q8):
    """({GGUF name: float64 array}, {GGUF name: GGUF type}) as llama.cpp computes with them:
    rows in Hugging Face's order (the reference applies rotary embeddings as Hugging Face
    does), Q8_0 ones dequantized."""
    taken, _ = layout(expects, config)
    weights, types = {}, {}
    for t in taken:
        w = dequantize_q8_0(t.q8, t.shape) if q8 and t.q8_type == Q8_0 else t.f32
        weights[t.name] = (unpermute(w, t.heads) if t.heads else w).astype(np.float64)
        types[t.name] = t.q8_type if q8 else t.native_type
    return weights, types


def as_operand(x, wtype):
    """x (float64 rows) as llama.cpp's CPU backend hands it to a product with weights of
    wtype: float32, then rounded to the weights' own type (F16, BF16, Q8_0 blocks)."""
    x = x.astype(np.float32)
    if wtype == F16:
        x = x.astype(np.float16).astype(np.float32)
    elif wtype == BF16:
        b = x.view(np.uint32).astype(np.uint64)
        x = (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    elif wtype == Q8_0:
        # ggml's x86 quantize_row_q8_0 for activations: id = 127 / amax, ties to even
        b = x.reshape(-1, 32)
        amax = np.abs(b).max(axis=1)
        d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
        with np.errstate(divide="ignore"):
            idv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = np.rint((b * idv[:, None]).astype(np.float32))
        x = (q * d[:, None]).astype(np.float32).reshape(x.shape)
    return x.astype(np.float64)


def unpermute(w, heads):
    return (w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def forward(weights, config, tokens, types=None):
    """Log-probabilities of the next token after each position (float64 numpy, llama with
    Hugging Face's rotary embedding, RMS norm, SwiGLU, grouped-query attention). types (GGUF
    name -> type) rounds each product's activations as llama.cpp does for that type."""
    c = config
    hidden, heads = c["hidden_size"], c["num_heads"]
    kv = c.get("num_kv_heads", heads)
    hd, eps = hidden // heads, c.get("norm_eps", 1e-5)
    theta = c.get("rope_theta", 10000.0)
    n = len(tokens)

    def norm(x, w):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w

    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rope(x):  # (n, h, hd)
        half = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
        return x * cos[:, None, :] + half * sin[:, None, :]

    def mul(x, name):
        return as_operand(x, (types or {}).get(name, F32)) @ weights[name].T

    x = weights["token_embd.weight"][tokens]
    for layer in range(c["num_layers"]):
        b = "blk.%d." % layer
        h = norm(x, weights[b + "attn_norm.weight"])
        q = rope(mul(h, b + "attn_q.weight").reshape(n, heads, hd))
        k = rope(mul(h, b + "attn_k.weight").reshape(n, kv, hd))
        v = mul(h, b + "attn_v.weight").reshape(n, kv, hd)
        rep = heads // kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        s = s + np.triu(np.full((n, n), -np.inf), 1)[None]
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", p, v).reshape(n, hidden)
        x = x + mul(a, b + "attn_output.weight")
        h = norm(x, weights[b + "ffn_norm.weight"])
        g = mul(h, b + "ffn_gate.weight")
        x = x + mul((g / (1 + np.exp(-g))) * mul(h, b + "ffn_up.weight"), b + "ffn_down.weight")
    x = norm(x, weights["output_norm.weight"])
    logits = mul(x, "output.weight" if "output.weight" in weights else "token_embd.weight")
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))


def llama_model(gen, dtypes, *, hidden=64, heads=4, kv_heads=2, layers=2, inter=80, vocab=96,
                lm_head=True, scale=0.3, seed=0, names=None, extra=(), config_extra=None,
                prune=True, arch="llama", head_dim=None):
    """(tensors, config) of a small llama model for the tests: dtypes maps "embed", "norm",
    "q", "k", "v", "o", "mlp", "head" to a precision; the projections 2:4, the rest dense;
    values large enough that attention and the q/k order matter. names renames tensors
    (true name -> stored name); extra tensors are appended. prune=False keeps the values of
    pruned elements stored (the mask must then zero them). arch "qwen2" adds the q, k, v
    biases, "qwen3" the q and k norms (head_dim, when given, is the config's)."""
    hd = head_dim or hidden // heads
    config = {"hidden_size": hidden, "num_heads": heads, "num_kv_heads": kv_heads,
              "intermediate_size": inter, "vocab_size": vocab, "num_layers": layers,
              "max_seq_len": 512, "norm_eps": 1e-5, "rope_theta": 10000.0}
    if head_dim:
        config["head_dim"] = head_dim
    config.update(config_extra or {})
    a = gguf_arch(arch)
    specs = [("model.embed_tokens.weight", [vocab, hidden], "embed", (0, 0), 1.0)]
    for i in range(layers):
        p = "model.layers.%d." % i
        specs += [(p + "input_layernorm.weight", [hidden], "norm", (0, 0), None),
                  (p + "self_attn.q_proj.weight", [heads * hd, hidden], "q", (2, 4), scale),
                  (p + "self_attn.k_proj.weight", [kv_heads * hd, hidden], "k", (2, 4), scale),
                  (p + "self_attn.v_proj.weight", [kv_heads * hd, hidden], "v", (2, 4), scale),
                  (p + "self_attn.o_proj.weight", [hidden, heads * hd], "o", (2, 4), scale),
                  (p + "post_attention_layernorm.weight", [hidden], "norm", (0, 0), None),
                  (p + "mlp.gate_proj.weight", [inter, hidden], "mlp", (2, 4), scale),
                  (p + "mlp.up_proj.weight", [inter, hidden], "mlp", (2, 4), scale),
                  (p + "mlp.down_proj.weight", [hidden, inter], "mlp", (2, 4), scale)]
        if a == "qwen2":
            specs += [(p + "self_attn.%s_proj.bias" % k, [n * hd], "norm", (0, 0), scale)
                      for k, n in (("q", heads), ("k", kv_heads), ("v", kv_heads))]
        if a == "qwen3":
            specs += [(p + "self_attn.%s_norm.weight" % k, [hd], "norm", (0, 0), None)
                      for k in "qk"]
    specs.append(("model.norm.weight", [hidden], "norm", (0, 0), None))
    if lm_head:
        specs.append(("lm_head.weight", [vocab, hidden], "head", (2, 4), scale))
    tensors = []
    for k, (name, shape, kind, nm, sc) in enumerate(specs):
        rng = np.random.default_rng([seed, k, 0x99])
        n = int(np.prod(shape))
        values = (1.0 + 0.1 * rng.standard_normal(n) if sc is None
                  else rng.standard_normal(n) * sc)
        name = (names or {}).get(name, name)
        tensors.append(gen.make_tensor(name, shape, dtypes[kind], nm, seed * 1000 + k,
                                       values=values, prune=prune))
    return tensors + list(extra), config
