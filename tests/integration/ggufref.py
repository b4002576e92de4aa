"""An independent writer of model.gguf and model.Q8_0.gguf (docs/MOUNT_LAYOUT.md, "llama.cpp
views [v3]", and the qwen2 and qwen3 architectures of v4) from the bytes the generator wrote,
for the tests: the q/k permutation as llama.cpp's converter writes it (a reshape and a swap of
axes), Q8_0 as quantize_row_q8_0_ref does in NumPy; and a NumPy forward pass of the llama
architecture over the same weights."""

import json
import os
import re
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


def write(expects, config, name, q8, arch="llama", vocab=None):
    """The bytes of model.gguf (q8 False) or model.Q8_0.gguf of the model, or None; arch its
    architecture (any case), vocab the vocabulary's key-values (vocab_kvs) or None for "none"."""
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
            ]
    kvs += vocab if vocab is not None else [_kv("tokenizer.ggml.model", 8, _kv_str("none"))]
    kvs += [_kv("tbmfs.omitted", 9, struct.pack("<IQ", 8, len(omitted))
                + b"".join(_kv_str(n) for n in omitted))]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(taken), len(kvs)) + b"".join(kvs)
    data = bytearray()  # appended to in place: bytes would be copied whole each time
    for t in taken:
        blob, ttype = (t.q8, t.q8_type) if q8 else (t.native, t.native_type)
        ne = t.ne()
        head += _kv_str(t.name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        head += struct.pack("<IQ", ttype, len(data))
        data += blob + bytes(-len(blob) % 32)
    head += bytes(-len(head) % 32)
    return head + data


def weights_of(expects, config, q8, arch="llama"):
    """({GGUF name: float64 array}, {GGUF name: GGUF type}) as llama.cpp computes with them:
    rows in Hugging Face's order (the reference applies rotary embeddings as Hugging Face
    does), Q8_0 ones dequantized."""
    taken, _ = layout(expects, config, arch)
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


def forward(weights, config, tokens, types=None, arch="llama"):
    """Log-probabilities of the next token after each position (float64 numpy, llama with
    Hugging Face's rotary embedding, RMS norm, SwiGLU, grouped-query attention; qwen2's q/k/v
    biases, qwen3's RMS norms of each head of q and k before the rotation and its head_dim).
    types (GGUF name -> type) rounds each product's activations as llama.cpp does for that
    type."""
    c = config
    heads = c["num_heads"]
    kv = c.get("num_kv_heads", heads)
    hd, eps = head_size(c, arch), c.get("norm_eps", 1e-5)
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

    def proj(h, b, w, count):
        """q, k or v of h: (n, count, hd), with its bias (qwen2) and head norm (qwen3)."""
        y = mul(h, b + "attn_%s.weight" % w)
        if b + "attn_%s.bias" % w in weights:
            y = y + weights[b + "attn_%s.bias" % w]
        y = y.reshape(n, count, hd)
        if b + "attn_%s_norm.weight" % w in weights:
            y = norm(y, weights[b + "attn_%s_norm.weight" % w])
        return y

    x = weights["token_embd.weight"][tokens]
    for layer in range(c["num_layers"]):
        b = "blk.%d." % layer
        h = norm(x, weights[b + "attn_norm.weight"])
        q, k, v = rope(proj(h, b, "q", heads)), rope(proj(h, b, "k", kv)), proj(h, b, "v", kv)
        rep = heads // kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
        s = s + np.triu(np.full((n, n), -np.inf), 1)[None]
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", p, v).reshape(n, heads * hd)
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
    return _make_tensors(gen, specs, dtypes, seed, prune, 0x99, names) + list(extra), config


def _make_tensors(gen, specs, dtypes, seed, prune, salt, names=None):
    """The tensors of specs (name, shape, kind, nm, scale: None for a norm's values near 1)."""
    tensors = []
    for k, (name, shape, kind, nm, sc) in enumerate(specs):
        rng = np.random.default_rng([seed, k, salt])
        n = int(np.prod(shape))
        values = (1.0 + 0.1 * rng.standard_normal(n) if sc is None
                  else rng.standard_normal(n) * sc)
        name = (names or {}).get(name, name)
        tensors.append(gen.make_tensor(name, shape, dtypes[kind], nm, seed * 1000 + k,
                                       values=values, prune=prune))
    return tensors



def qwen_model(gen, arch, dtypes, *, hidden=64, heads=4, kv_heads=2, hd=None, layers=2,
               inter=80, vocab=96, lm_head=True, scale=0.3, seed=0, prune=True):
    """(tensors, config) of a small qwen2 or qwen3 model for the tests, as llama_model: qwen2
    with q/k/v biases, qwen3 with q/k head norms and head_dim hd (config "head_dim" when given,
    which need not be hidden / heads)."""
    hd = hd or hidden // heads
    config = {"hidden_size": hidden, "num_heads": heads, "num_kv_heads": kv_heads,
              "intermediate_size": inter, "vocab_size": vocab, "num_layers": layers,
              "max_seq_len": 512, "norm_eps": 1e-6, "rope_theta": 1000000.0}
    if arch == "qwen3" and hd != hidden // heads:
        config["head_dim"] = hd
    specs = [("model.embed_tokens.weight", [vocab, hidden], "embed", (0, 0), 1.0)]
    for i in range(layers):
        p = "model.layers.%d." % i
        specs += [(p + "input_layernorm.weight", [hidden], "norm", (0, 0), None),
                  (p + "self_attn.q_proj.weight", [heads * hd, hidden], "q", (2, 4), scale),
                  (p + "self_attn.k_proj.weight", [kv_heads * hd, hidden], "k", (2, 4), scale),
                  (p + "self_attn.v_proj.weight", [kv_heads * hd, hidden], "v", (2, 4), scale),
                  (p + "self_attn.o_proj.weight", [hidden, heads * hd], "o", (2, 4), scale)]
        if arch == "qwen2":
            specs += [(p + "self_attn.%s_proj.bias" % w, [n * hd], "norm", (0, 0), 0.5)
                      for w, n in (("q", heads), ("k", kv_heads), ("v", kv_heads))]
        else:
            specs += [(p + "self_attn.%s_norm.weight" % w, [hd], "norm", (0, 0), None)
                      for w in ("q", "k")]
        specs += [(p + "post_attention_layernorm.weight", [hidden], "norm", (0, 0), None),
                  (p + "mlp.gate_proj.weight", [inter, hidden], "mlp", (2, 4), scale),
                  (p + "mlp.up_proj.weight", [inter, hidden], "mlp", (2, 4), scale),
                  (p + "mlp.down_proj.weight", [hidden, inter], "mlp", (2, 4), scale)]
    specs.append(("model.norm.weight", [hidden], "norm", (0, 0), None))
    if lm_head:
        specs.append(("lm_head.weight", [vocab, hidden], "head", (2, 4), scale))
    return _make_tensors(gen, specs, dtypes, seed, prune, 0x9E), config

# ---- The vocabulary (contract v4, "Vocabulary [v4]"): an independent reading of a tokenizer
# directory into the GGUF key-values, for the tests. ----

# The splits each llama.cpp pre-tokenizer stands for (src/llama-vocab.cpp of its release
# v0.4.0), as Hugging Face writes them in tokenizer.json; with llama.cpp's ignore_merges and
# clean_spaces for the name, and whether every character falls in a match of each regex.
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_UP, _LO = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_LLAMA3_RE = (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35_RE = (_CONTR + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O_RE = (r"[^\r\n\p{L}\p{N}]?" + _UP + "*" + _LO + "+" + _CONTR + r"?|[^\r\n\p{L}\p{N}]?"
             + _UP + "+" + _LO + "*" + _CONTR + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN_RE = (r"[^\r\n\p{L}\p{N}]?" + _UP + "*" + _LO + r"+|[^\r\n\p{L}\p{N}]?" + _UP + "+"
              + _LO + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DS3_RE = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
           "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
_SEED_RE = (_CONTR + "|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\r\n]+"
            "|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
PRETOKENIZERS = [  # (name, splits, ignore_merges, clean_spaces, total)
    ("gpt-2", [_GPT2_RE], False, True, False),
    ("gpt-2", [_GPT2_RE[:-len(r"|\s+")]], False, True, False),
    ("llama-bpe", [_LLAMA3_RE], True, True, True),
    ("dbrx", [_LLAMA3_RE], False, True, True),
    ("qwen2", [_QWEN2_RE], False, False, True),
    ("stablelm2", [_QWEN2_RE], False, True, True),
    ("qwen35", [_QWEN35_RE], False, False, True),
    ("gpt-4o", [_GPT4O_RE], False, False, True),
    ("tekken", [_TEKKEN_RE], True, False, True),
    ("deepseek-v3", [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", _DS3_RE],
     False, False, False),
    ("starcoder", [r"\p{N}", _GPT2_RE], False, True, False),
    ("smollm", [r"\p{N}", _GPT2_RE], False, False, False),
    ("seed-coder", [_SEED_RE], False, False, True),
]
SPACE = "\u2581"


class Unusable(Exception):
    """A tokenizer.json the GGUF files cannot carry; the text is the contract's reason."""


def _steps(o, key):
    if not o:
        return []
    if o.get("type") == "Sequence":
        return [s for x in o.get(key, []) for s in _steps(x, key)]
    return [o]


def _pretokenizer(pre, ignore_merges, clean):
    if not pre:
        raise Unusable("tokenizer.json has no pre_tokenizer")
    splits, removed, byte_level = [], [], False
    for s in _steps(pre, "pretokenizers"):
        if byte_level:
            raise Unusable("tokenizer.json's pre_tokenizer splits after its ByteLevel step")
        t = s.get("type")
        if t == "Split":
            rx = s.get("pattern", {}).get("Regex")
            beh, inv = s.get("behavior"), s.get("invert", False)
            if rx is None or not ((beh == "Isolated" and not inv) or (beh == "Removed" and inv)):
                raise Unusable("a Split llama.cpp does not have")
            splits.append(rx)
            removed.append(beh == "Removed")
        elif t == "ByteLevel":
            if s.get("add_prefix_space"):
                raise Unusable("tokenizer.json's ByteLevel pre-tokenizer adds a space before "
                               "the text, which llama.cpp does not")
            if s.get("use_regex", True):
                splits.append(_GPT2_RE)
                removed.append(False)
            byte_level = True
        elif t == "Digits":
            splits.append(r"\p{N}" if s.get("individual_digits") else r"\p{N}+")
            removed.append(False)
        else:
            raise Unusable("tokenizer.json's pre_tokenizer has a step llama.cpp does not have")
    if not byte_level:
        raise Unusable("tokenizer.json's pre_tokenizer does not end in a ByteLevel step")
    fits = [p for p in PRETOKENIZERS if p[1] == splits and (p[4] or not any(removed))]
    if not fits:
        raise Unusable("llama.cpp has no pre-tokenizer with the rules of tokenizer.json's "
                       "pre_tokenizer")
    return max(fits, key=lambda p: 2 * (p[2] == ignore_merges) + (p[3] == clean)
               - PRETOKENIZERS.index(p) / 100)[0]


def _config_token(cfg, key):
    v = cfg.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def tokenizer_vocab(tokdir, vocab_size):
    """The vocabulary of tokenizer directory tokdir for vocab_size ids, as a dict, or raises
    Unusable with the reason."""
    with open(os.path.join(tokdir, "tokenizer.json"), "rb") as f:
        raw = f.read()
    try:
        tj = json.loads(raw)
    except ValueError:
        raise Unusable("tokenizer.json is not valid JSON")
    try:
        with open(os.path.join(tokdir, "tokenizer_config.json"), "rb") as f:
            cfg = json.loads(f.read())
    except (OSError, ValueError):
        cfg = {}
    if not isinstance(cfg, dict):
        cfg = {}
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        raise Unusable("tokenizer.json's model is %s, not BPE" % model.get("type"))
    llama = bool(model.get("byte_fallback"))
    norm = _steps(tj.get("normalizer"), "normalizers")
    pres = _steps(tj.get("pre_tokenizer"), "pretokenizers")
    out = {"kind": "llama" if llama else "gpt2", "pre": None, "add_space_prefix": None}
    if llama:
        escaped = in_norm = prefix = False
        for s in norm:
            if s.get("type") == "NFC":
                continue
            if (s.get("type") == "Replace" and s.get("pattern") == {"String": " "}
                    and s.get("content") == SPACE):
                escaped = in_norm = True
            elif s.get("type") == "Prepend" and s.get("prepend") == SPACE:
                prefix = True
            else:
                raise Unusable("normalizer")
        for s in pres:
            if s.get("type") == "Metaspace" and s.get("replacement") == SPACE \
                    and not s.get("split"):
                escaped = True
                scheme = s.get("prepend_scheme")
                prefix |= scheme != "never" if scheme else bool(s.get("add_prefix_space"))
            elif not (s.get("type") == "Split" and in_norm
                      and s.get("pattern") == {"String": " "}):
                raise Unusable("pre_tokenizer")
        if not escaped:
            raise Unusable("spaces")
        out["add_space_prefix"] = prefix
    else:
        if not any(s.get("type") == "ByteLevel" for s in pres + _steps(tj.get("decoder"),
                                                                        "decoders")):
            raise Unusable("tokenizer.json is BPE with neither byte_fallback nor ByteLevel, a "
                           "kind llama.cpp cannot use")
        if any(s.get("type") != "NFC" for s in norm):
            raise Unusable("tokenizer.json's normalizer does what llama.cpp does not (a "
                           "byte-level tokenizer may have none but NFC)")
        out["pre"] = _pretokenizer(tj.get("pre_tokenizer"), bool(model.get("ignore_merges")),
                                   cfg.get("clean_up_tokenization_spaces", True) is not False)
    by_id, added = {}, {}
    for text, i in model["vocab"].items():
        if i in by_id:
            raise Unusable("tokenizer.json gives id %d to two tokens" % i)
        by_id[i] = text
    for a in tj.get("added_tokens") or []:
        if by_id.get(a["id"], a["content"]) != a["content"]:
            raise Unusable("tokenizer.json gives id %d to two tokens" % a["id"])
        by_id[a["id"]] = a["content"]
        added[a["id"]] = bool(a.get("special"))
    count = max(by_id) + 1
    if count > vocab_size:
        raise Unusable("tokenizer.json has %d tokens, vocab_size is %d" % (count, vocab_size))
    tokens = [by_id.get(i, "[PAD%d]" % i) for i in range(vocab_size)]
    ids = {}
    for i, t in enumerate(tokens):
        if t in ids:
            raise Unusable("token %r twice" % t)
        ids[t] = i
    unk = model.get("unk_token")
    unk_id = ids.get(unk if unk is not None else _config_token(cfg, "unk_token"), -1)
    types = []
    for i, t in enumerate(tokens):
        if llama and i in by_id and re.fullmatch(r"<0x[0-9A-F]{2}>", t):
            types.append(6)
        elif i == unk_id and i in by_id:
            types.append(2)
        elif i in added:
            types.append(3 if added[i] else 4)
        elif i not in by_id:
            types.append(5)
        else:
            types.append(1)
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in model.get("merges", [])]
    if llama:
        scores = [None] * vocab_size
        for r, (a, b) in enumerate(merges):
            i = ids.get(a + b)
            if i is not None and i in by_id and scores[i] is None:
                scores[i] = -float(r) if r else 0.0   # +0.0 for rank 0
        out["scores"] = [s if s is not None else 0.0 if i in by_id and (
            len(tokens[i]) == 1 or types[i] == 6 or i in added) else -float(len(merges))
            for i, s in enumerate(scores)]
    else:
        out["merges"] = ["%s %s" % (a, b) for a, b in merges]
    if llama:   # added tokens not special: U+2581 as spaces, as llama.cpp's converter writes
        tokens = [t.replace(SPACE, " ") if ty == 4 else t for t, ty in zip(tokens, types)]
        if len(set(tokens)) != len(tokens):
            raise Unusable("a token twice once its U+2581 are spaces")
    out["tokens"], out["types"] = tokens, types
    for key in ("bos", "eos", "unk", "pad"):
        out[key] = ids.get(_config_token(cfg, key + "_token"), -1)
    post = {"bos": False, "eos": False}
    for s in _steps(tj.get("post_processor"), "processors"):
        single = s.get("single") if s.get("type") == "TemplateProcessing" else None
        if single:
            post["bos"] |= "SpecialToken" in single[0]
            post["eos"] |= len(single) > 1 and "SpecialToken" in single[-1]
    for key in ("bos", "eos"):
        given = cfg.get("add_%s_token" % key)
        out["add_" + key] = given if isinstance(given, bool) else post[key]
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):
        tmpl = next((t.get("template") for t in tmpl if t.get("name") == "default"), None)
    out["chat_template"] = tmpl if isinstance(tmpl, str) else None
    return out


def vocab_kvs(v):
    """The key-values of vocabulary v (tokenizer_vocab) in the contract's order."""
    def strings(key, items):
        return _kv(key, 9, struct.pack("<IQ", 8, len(items)) + b"".join(_kv_str(s.encode(
            "utf-8", "surrogatepass")) for s in items))
    kvs = [_kv("tokenizer.ggml.model", 8, _kv_str(v["kind"]))]
    if v["pre"]:
        kvs.append(_kv("tokenizer.ggml.pre", 8, _kv_str(v["pre"])))
    kvs.append(strings("tokenizer.ggml.tokens", v["tokens"]))
    if v["kind"] == "llama":
        kvs.append(_kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, len(v["scores"]))
                       + np.asarray(v["scores"], dtype="<f4").tobytes()))
    kvs.append(_kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(v["types"]))
                   + np.asarray(v["types"], dtype="<i4").tobytes()))
    if v["kind"] == "gpt2":
        kvs.append(strings("tokenizer.ggml.merges", v["merges"]))
    for key, name in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        if v[key] >= 0:
            kvs.append(_kv("tokenizer.ggml.%s_token_id" % name, 4, struct.pack("<I", v[key])))
    kvs.append(_kv("tokenizer.ggml.add_bos_token", 7, struct.pack("<B", v["add_bos"])))
    kvs.append(_kv("tokenizer.ggml.add_eos_token", 7, struct.pack("<B", v["add_eos"])))
    if v["kind"] == "llama":
        kvs.append(_kv("tokenizer.ggml.add_space_prefix", 7,
                       struct.pack("<B", v["add_space_prefix"])))
    if v["chat_template"] is not None:
        kvs.append(_kv("tokenizer.chat_template", 8, _kv_str(v["chat_template"].encode())))
    return kvs
