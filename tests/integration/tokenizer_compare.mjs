// Compares llama.cpp's tokenizer (node-llama-cpp, on a GGUF file that carries a vocabulary)
// with Hugging Face's own JavaScript tokenizer on the tokenizer's files, for every text of a
// corpus and the tokenizer's special tokens, and a chat prompt; prints the result as JSON.
// Usage: node tokenizer_compare.mjs TOKENIZERS_DIR LLAMA_DIR TOKENIZER_DIR MODEL.gguf CORPUS.json
//        CHAT.json
// TOKENIZERS_DIR holds node_modules/@huggingface/{tokenizers,jinja}; CHAT.json is
// {"messages": [...], "llama_prompt": the prompt llama.cpp's template formatting made}.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [tokDir, llamaDir, tokenizerDir, modelPath, corpusPath, chatPath] = process.argv.slice(2);
const load = (dir, ...p) => import(pathToFileURL(path.join(dir, "node_modules", ...p)).href);
const { Tokenizer } = await load(tokDir, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Template } = await load(tokDir, "@huggingface", "jinja", "dist", "index.js");
const { getLlama, LlamaLogLevel } = await load(llamaDir, "node-llama-cpp", "dist", "index.js");

const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const tokenizerJson = readJson(path.join(tokenizerDir, "tokenizer.json"));
const configPath = path.join(tokenizerDir, "tokenizer_config.json");
const config = fs.existsSync(configPath) ? readJson(configPath) : {};
const hf = new Tokenizer(tokenizerJson, config);

// The corpus, then the special tokens' strings alone, inside text and side by side.
const texts = readJson(corpusPath);
const specials = tokenizerJson.added_tokens.filter((t) => t.special).map((t) => t.content);
for (const s of specials.slice(0, 40)) {
    texts.push(s, `Hello${s}world`, ` ${s} `, `${s}\n${s}`, `text ${s}${specials[0]} more`);
}

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, vocabOnly: true });
const bos = model.tokens.bos, eos = model.tokens.eos;

// llama_tokenize with add_special and parse_special, as llama.cpp's tools tokenize a prompt:
// node-llama-cpp tokenizes without add_special, so BOS and EOS are added here as llama.cpp adds
// them (its add_bos_token and add_eos_token, read from the file).
function llamaEncode(text) {
    const ids = Array.from(model._model.tokenize(text, true));
    if (model.tokens.shouldPrependBosToken) ids.unshift(bos);
    if (model.tokens.shouldAppendEosToken) ids.push(eos);
    return ids;
}
// Hugging Face's ids for a text: the tokenizer's, with BOS and EOS as transformers adds them:
// tokenizer_config.json's add_bos_token and add_eos_token when given (a Llama-style tokenizer
// rewrites its post-processor from them; tokenizers.js reads only the post-processor), else
// what the post-processor adds.
const specialId = (k) => {
    const t = typeof config[k] === "object" && config[k] !== null ? config[k].content : config[k];
    return typeof t === "string" ? hf.model.tokens_to_ids.get(t) ?? null : null;
};
const hfBos = specialId("bos_token"), hfEos = specialId("eos_token");
// What the post-processor adds, seen on a probe text.
const probe = hf.encode("a", { add_special_tokens: false }).ids, probeFull = hf.encode("a").ids;
const postBos = probeFull[0] !== probe[0];
const postEos = probeFull[probeFull.length - 1] !== probe[probe.length - 1];
const addBos = typeof config.add_bos_token === "boolean" ? config.add_bos_token : postBos;
const addEos = typeof config.add_eos_token === "boolean" ? config.add_eos_token : postEos;
function hfEncode(text) {
    const ids = hf.encode(text, { add_special_tokens: false }).ids;
    if (addBos && hfBos !== null) ids.unshift(hfBos);
    if (addEos && hfEos !== null) ids.push(hfEos);
    return ids;
}
const llamaDecode = (ids) =>
    ids.length ? model._model.detokenize(Uint32Array.from(ids), true) : "";
const hfDecode = (ids) => (ids.length ? hf.decode(ids) : "");

const differ = [];
let same = 0;
for (const text of texts) {
    const want = hfEncode(text);
    const got = llamaEncode(text);
    const idsSame = want.length === got.length && want.every((t, i) => t === got[i]);
    const wantText = hfDecode(want), gotText = llamaDecode(want);
    if (idsSame && wantText === gotText) {
        same++;
        continue;
    }
    differ.push({ text, hf_ids: want, llama_ids: got, hf_text: wantText, llama_text: gotText });
}

// The chat: Hugging Face's apply_chat_template (the template rendered with the tokenizer's
// special tokens, tokenized without adding any) against llama.cpp's prompt, tokenized as
// llama.cpp's tools do.
let chat = null;
const chatIn = readJson(chatPath);
if (chatIn.llama_prompt !== null) {
    const tmpl = Array.isArray(config.chat_template)
        ? config.chat_template.find((t) => t.name === "default").template
        : config.chat_template;
    const specialText = (k) => (typeof config[k] === "object" && config[k] !== null
                                ? config[k].content : config[k]) ?? "";
    const rendered = new Template(tmpl).render({
        messages: chatIn.messages, add_generation_prompt: true,
        bos_token: specialText("bos_token"), eos_token: specialText("eos_token"),
        unk_token: specialText("unk_token"), pad_token: specialText("pad_token"),
    });
    const want = hf.encode(rendered, { add_special_tokens: false }).ids;
    const got = llamaEncode(chatIn.llama_prompt);
    chat = { hf_prompt: rendered, llama_prompt: chatIn.llama_prompt, hf_ids: want, llama_ids: got,
             same: want.length === got.length && want.every((t, i) => t === got[i]) };
}

process.stdout.write(JSON.stringify({
    texts: texts.length, same, differ, chat,
    template_in_file: model.fileInfo.metadata?.tokenizer?.chat_template ?? null,
}) + "\n");
await model.dispose();
await llama.dispose();
