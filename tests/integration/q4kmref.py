"""A reference of model.Q4_K_M.gguf (docs/MOUNT_LAYOUT.md, "model.Q4_K_M.gguf [v4]") for the
tests: the type llama_model_quantize (llama.cpp v0.4.0, LLAMA_FTYPE_MOSTLY_Q4_K_M, default
parameters) gives each tensor of a model.gguf (q4km_types), and the whole file rebuilt from
model.gguf with tbmfs's kernels through the quantize_rows program (rebuild). test_q4km.py holds
both to llama.cpp's own output."""

import re
import struct
import subprocess

import numpy as np

import llamaquant

F32, F16, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 6, 7, 8, 12, 13, 14, 30
BLOCK = {t: v[1] for t, v in llamaquant.GGML_TYPES.items()}
FALLBACK = {Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0}


class RebuildError(Exception):
    pass


# --- the rule (llama.cpp src/llama-quant.cpp, llama_model_quantize_impl) ---

def n_dims(ne):
    """ggml_n_dims: trailing dimensions of 1 do not count."""
    n = len(ne)
    while n > 1 and ne[n - 1] == 1:
        n -= 1
    return n


def llama_order(name):
    """weight_name_comparer: the layer of blk.N. (-1 for none), then the name's bytes."""
    m = re.match(r"blk\.([+-]?\d+)", name)
    return (int(m.group(1)) if m else -1, name.encode())


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def is_70b(arch, kv):
    layers = kv(arch + ".block_count")
    if arch == "llama":
        return layers == 80 and kv(arch + ".attention.head_count") != \
            kv(arch + ".attention.head_count_kv")
    return arch == "qwen2" and layers == 80


def q4km_types(g):
    """{tensor name: type} of llama_model_quantize with LLAMA_FTYPE_MOSTLY_Q4_K_M for the
    GGUF file g (a llamaquant.Gguf of model.gguf), from llama.cpp v0.4.0's src/llama-quant.cpp:
    tensor_allows_quantization (1-D to ggml_n_dims, names not ending in weight, norms: kept),
    llama_tensor_get_type_impl (the output and a tied token_embd: Q6_K, or Q8_0 for rows not a
    multiple of 256; attn_v and ffn_down: Q6_K where use_more_bits, attn_v of a 70B model Q5_K;
    the rest Q4_K; counters in llama.cpp's tensor order) and tensor_type_fallback."""
    arch = g.kv("general.architecture")
    tensors = sorted(g.tensors, key=lambda t: llama_order(t["name"]))
    tied = not any(t["name"] == "output.weight" for t in tensors)
    n_attn_v = sum("attn_v.weight" in t["name"] for t in tensors)
    n_layer = g.kv(arch + ".block_count")
    big = is_70b(arch, g.kv)
    i_attn_v = i_ffn_down = 0
    out = {}
    for t in tensors:
        name, ne = t["name"], t["ne"]
        if n_dims(ne) < 2 or not name.endswith("weight") or "_norm.weight" in name:
            out[name] = t["type"]
            continue
        new = Q4_K
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            new = Q8_0 if ne[0] % 256 else Q6_K
        elif "attn_v.weight" in name:
            if use_more_bits(i_attn_v, n_attn_v):
                new = Q6_K
            if big and new == Q4_K:
                new = Q5_K
            i_attn_v += 1
        elif "ffn_down" in name:
            if use_more_bits(i_ffn_down, n_layer):
                new = Q6_K
            i_ffn_down += 1
        if ne[0] % BLOCK[new]:
            new = FALLBACK.get(new, new)
            if ne[0] % BLOCK[new]:
                new = F16
        out[name] = new
    return out


# --- the file, rebuilt with tbmfs's kernels ---

def as_f32(g, t):
    raw = g.tensor_bytes(t)
    if t["type"] == F32:
        return np.frombuffer(raw, dtype="<f4")
    if t["type"] == F16:
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    b = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return b.view(np.float32)


def kernel(program, ttype, values, level):
    p = subprocess.run([program, str(ttype), level], input=values.astype("<f4").tobytes(),
                       capture_output=True, timeout=300)
    if p.returncode != 0:
        raise RebuildError("quantize_rows %d: %s" % (ttype, p.stderr.decode(errors="replace")))
    return p.stdout


def rebuild(g, types, program, level):
    """The bytes of model.Q4_K_M.gguf from model.gguf g, with the types given: tensors in
    llama.cpp's order, quantized by the kernels of tbmfs's quantize_rows program (all tensors
    of one type in one call) on level (scalar, avx2, avx512), the key-values of g but
    general.file_type and general.quantization_version, then those two."""
    tensors = sorted(g.tensors, key=lambda t: llama_order(t["name"]))
    data = {}
    for ttype in set(types.values()):
        todo = [t for t in tensors if types[t["name"]] == ttype and t["type"] != ttype]
        if not todo:
            continue
        rows = [as_f32(g, t) for t in todo]
        out = kernel(program, ttype, np.concatenate(rows), level)
        at = 0
        for t, r in zip(todo, rows):
            size = r.size // BLOCK[ttype] * llamaquant.GGML_TYPES[ttype][2]
            data[t["name"]] = out[at:at + size]
            at += size
    for t in tensors:
        data.setdefault(t["name"], g.tensor_bytes(t))

    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    kvs = [s(k) + raw for k, _, _, raw in g.kvs
           if k not in ("general.file_type", "general.quantization_version")]
    kvs += [s("general.quantization_version") + struct.pack("<II", 4, 2),
            s("general.file_type") + struct.pack("<II", 4, llamaquant.Q4_K_M)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    body = bytearray()  # appended to in place: bytes would be copied whole each time
    for t in tensors:
        nd = n_dims(t["ne"])
        head += s(t["name"]) + struct.pack("<I%dQ" % nd, nd, *t["ne"][:nd])
        head += struct.pack("<IQ", types[t["name"]], len(body))
        blob = data[t["name"]]
        body += blob + bytes(-len(blob) % 32)
    return head + bytes(-len(head) % 32) + body
