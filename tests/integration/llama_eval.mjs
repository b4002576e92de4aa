// Runs llama.cpp (node-llama-cpp, CPU) on a GGUF file and prints, as JSON,
// the next-token log-probabilities after each of the given token ids, and
// the seconds the load and the first evaluation took.
// Usage: node llama_eval.mjs MODULE_DIR MODEL.gguf TOKEN...
import path from "node:path";
import { pathToFileURL } from "node:url";

const [moduleDir, modelPath, ...tokenArgs] = process.argv.slice(2);
const lib = await import(pathToFileURL(path.join(moduleDir, "node_modules", "node-llama-cpp",
                                                 "dist", "index.js")).href);
const { getLlama, LlamaModel, LlamaLogLevel } = lib;

// The files carry no vocabulary (tokenizer.ggml.model "none"): loadModel's
// getWarnings() tokenizes a test string, which aborts the process on such a
// model, so it is left out; llama.cpp is given token ids.
LlamaModel.prototype.getWarnings = function () { return []; };

const tokens = tokenArgs.map(Number);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const t0 = performance.now();
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
// An F32 KV cache and no flash attention: the reference computes in float32
const context = await model.createContext({
    contextSize: 64, batchSize: 64, threads: 2, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const seq = context.getSequence();
const out = await seq.controlledEvaluate(
    tokens.map((t) => [t, { generateNext: { probabilities: true } }]));
const seconds = (performance.now() - t0) / 1000;
const logprobs = out.map((o) => {
    const row = {};
    for (const [tok, p] of o.next.probabilities)
        row[tok] = Math.log(p);
    return row;
});
process.stdout.write(JSON.stringify({ seconds, logprobs }) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
