/**
 * llama.cpp in process, through `node-llama-cpp` (an optional dependency), as a rollout
 * engine behind the same {@link TokenPolicy} interface as the vLLM / SGLang clients: token ids
 * in, sampled ids out with the engine's log-prob of each, several sequences at once (one
 * llama.cpp context per sequence, decoding concurrently).
 *
 * Log-probs are the engine's own: node-llama-cpp's `confidence` is the probability of the
 * sampled token under the distribution llama.cpp sampled from, after its sampler chain
 * (top-k, top-p, then temperature: node-llama-cpp 3.21.1 `llama/addon/AddonSampler.cpp`), so
 * with top-p < 1 the nucleus is chosen on the temperature-1 distribution, as llama.cpp does.
 *
 * Weights are swapped with {@link LlamaCppEngine.loadWeights} (a new GGUF file); each load
 * bumps the engine's weight version, reported with every completion.
 */
import type { TokenCompletion, TokenPolicy, TokenSample, TokenSamplingRequest } from './tokens.js';
import { checkInteger, checkNonEmptyString, checkNumber, checkObject, rangeError } from '../check.js';

// Only the parts of node-llama-cpp used here, typed locally so that this file (and the
// declarations it emits) compile without the optional package.
interface NodeLlamaCpp {
  getLlama(options: Record<string, unknown>): Promise<LlamaInstance>;
}
interface LlamaInstance {
  loadModel(options: { modelPath: string; gpuLayers?: number; useMmap?: boolean }): Promise<LlamaModelHandle>;
  dispose(): Promise<void>;
}
interface LlamaModelHandle {
  createContext(options: Record<string, unknown>): Promise<LlamaContextHandle>;
  readonly tokenizer?: unknown;
  detokenize(tokens: readonly number[]): string;
  dispose(): Promise<void>;
}
interface LlamaContextHandle {
  getSequence(): LlamaSequenceHandle;
  dispose(): Promise<void>;
}
interface LlamaSequenceHandle {
  clearHistory(): Promise<void>;
  controlledEvaluate(
    input: ControlledInput[],
  ): Promise<({ next: { token?: number | null; confidence?: number; probabilities?: Map<number, number> } } | undefined)[]>;
}
type ControlledInput = number | [number, { generateNext: { token?: boolean; confidence?: boolean; probabilities?: boolean; options?: Record<string, unknown> } }];

/** Loads `node-llama-cpp`, or explains how to get it. */
export async function loadNodeLlamaCpp(): Promise<NodeLlamaCpp> {
  try {
    return (await import('node-llama-cpp' as string)) as NodeLlamaCpp;
  } catch (error) {
    throw new Error(
      "The llama.cpp engine needs the optional package 'node-llama-cpp' (3.21.1), which is not installed or did not load: " +
        `run \`npm install node-llama-cpp@3.21.1\`. (${(error as Error).message})`,
    );
  }
}

/** Options of {@link LlamaCppEngine.open}. */
export interface LlamaCppEngineOptions {
  /** The GGUF file to serve first. */
  modelPath: string;
  /** Sequences sampled at once (llama.cpp parallel sequences). Default 8. */
  sequences?: number;
  /** Context size of each sequence, tokens. Default 256. */
  contextSize?: number;
  /**
   * CPU threads for evaluation; 0 = as many as the machine has. Default 1: for a small model
   * ggml's spinning thread pool costs more than it gains (measured on 2 busy cores: 448 tokens
   * in 0.27 s with 1 thread, 16 s with 2).
   */
  threads?: number;
  /** Version number of the first weights. Default 0. */
  weightVersion?: number;
  /**
   * Element type of the KV cache. Default 'f32', so that the engine computes what an f32
   * trainer does; llama.cpp's own default 'f16' costs ~1e-3 nats of log-prob mismatch.
   */
  kvCacheType?: 'f32' | 'f16';
}

/**
 * A llama.cpp rollout engine (CPU build; a tiny policy gains nothing from a GPU, and a
 * machine without one must work). Open with {@link LlamaCppEngine.open}; close when done.
 */
export class LlamaCppEngine implements TokenPolicy {
  #llama: LlamaInstance;
  #model: LlamaModelHandle;
  #contexts: LlamaContextHandle[];
  #free: LlamaSequenceHandle[];
  #waiting: ((sequence: LlamaSequenceHandle) => void)[] = [];
  #modelPath: string;
  #version: number;
  readonly #options: Required<Omit<LlamaCppEngineOptions, 'modelPath' | 'weightVersion'>>;
  #requests = 0;

  private constructor(llama: LlamaInstance, model: LlamaModelHandle, contexts: LlamaContextHandle[], options: Required<LlamaCppEngineOptions>) {
    this.#llama = llama;
    this.#model = model;
    this.#contexts = contexts;
    this.#free = contexts.map((context) => context.getSequence());
    this.#modelPath = options.modelPath;
    this.#version = options.weightVersion;
    this.#options = { sequences: options.sequences, contextSize: options.contextSize, threads: options.threads, kvCacheType: options.kvCacheType };
  }

  /**
   * Starts llama.cpp's CPU build (no download, no source build: node-llama-cpp's prebuilt
   * binary) and loads `modelPath`.
   * @throws Error naming `node-llama-cpp` when it is not installed; TypeError / RangeError for bad options.
   */
  static async open(options: LlamaCppEngineOptions): Promise<LlamaCppEngine> {
    checkObject('options', options);
    const settings: Required<LlamaCppEngineOptions> = {
      modelPath: checkNonEmptyString('options.modelPath', options.modelPath),
      sequences: checkInteger('options.sequences', options.sequences, 8, 1, 256),
      contextSize: checkInteger('options.contextSize', options.contextSize, 256, 8, 1 << 20),
      threads: checkInteger('options.threads', options.threads, 1, 0, 1024),
      weightVersion: checkInteger('options.weightVersion', options.weightVersion, 0, 0, Number.MAX_SAFE_INTEGER),
      kvCacheType: options.kvCacheType ?? 'f32',
    };
    if (settings.kvCacheType !== 'f32' && settings.kvCacheType !== 'f16') throw rangeError('options.kvCacheType', "'f32' or 'f16'", settings.kvCacheType);
    const { getLlama } = await loadNodeLlamaCpp();
    const llama = await getLlama({ gpu: false, build: 'never', skipDownload: true, progressLogs: false, logLevel: 'error', maxThreads: settings.threads });
    const { model, contexts } = await LlamaCppEngine.#load(llama, settings.modelPath, settings);
    return new LlamaCppEngine(llama, model, contexts, settings);
  }

  static async #load(llama: LlamaInstance, modelPath: string, options: { sequences: number; contextSize: number; threads: number; kvCacheType: 'f32' | 'f16' }) {
    const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: false });
    // One context per sequence: sequences sharing a context share its decode batches, and in
    // node-llama-cpp 3.21.1 that scored about 1 sampled token in 10,000 of the demo's rollouts
    // off by several nats (a token's log-prob as if it had another context), depending on
    // scheduling. Separate contexts still decode concurrently, on the libuv thread pool.
    const contexts = await Promise.all(Array.from({ length: options.sequences }, () => model.createContext({
      sequences: 1,
      contextSize: options.contextSize,
      batchSize: Math.min(512, options.contextSize),
      threads: options.threads,
      flashAttention: false,
      // llama.cpp keeps the KV cache in f16 by default: ~1e-3 nats off the f32 forward.
      experimentalKvCacheKeyType: options.kvCacheType.toUpperCase(),
      experimentalKvCacheValueType: options.kvCacheType.toUpperCase(),
    })));
    return { model, contexts };
  }

  /** The version of the weights now loaded. */
  get weightVersion(): number {
    return this.#version;
  }

  /** The GGUF file now loaded. */
  get modelPath(): string {
    return this.#modelPath;
  }

  /**
   * Replaces the weights with those of the GGUF file `modelPath` (same architecture or not),
   * after the completions in flight finish; new requests wait for the new weights.
   * @returns the seconds the reload took (model load and context creation).
   */
  async loadWeights(modelPath: string, version: number): Promise<{ seconds: number }> {
    checkNonEmptyString('modelPath', modelPath);
    checkInteger('version', version, 0, 0, Number.MAX_SAFE_INTEGER);
    const sequences = await Promise.all(Array.from({ length: this.#options.sequences }, () => this.#acquire()));
    const started = performance.now();
    try {
      await Promise.all(this.#contexts.map((context) => context.dispose()));
      await this.#model.dispose();
      const { model, contexts } = await LlamaCppEngine.#load(this.#llama, modelPath, this.#options);
      this.#model = model;
      this.#contexts = contexts;
      this.#modelPath = modelPath;
      this.#version = version;
      sequences.splice(0, sequences.length, ...contexts.map((context) => context.getSequence()));
    } finally {
      for (const s of sequences) this.#release(s);
    }
    return { seconds: (performance.now() - started) / 1000 };
  }

  async #acquire(): Promise<LlamaSequenceHandle> {
    const free = this.#free.pop();
    if (free) return free;
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #release(sequence: LlamaSequenceHandle): void {
    const next = this.#waiting.shift();
    if (next) {
      next(sequence);
    } else {
      this.#free.push(sequence);
    }
  }

  /**
   * Samples `n` continuations of `promptTokenIds`, each on its own llama.cpp sequence (at most
   * `sequences` at once across all requests), with temperature, top-p and a seed; every sampled
   * id comes with the engine's log-prob of it.
   */
  async complete(request: TokenSamplingRequest): Promise<TokenCompletion> {
    checkObject('request', request);
    const prompt = [...request.promptTokenIds];
    if (prompt.length === 0) throw rangeError('request.promptTokenIds', 'at least one token id', '[]');
    const maxTokens = checkInteger('request.maxTokens', request.maxTokens, 16, 1, this.#options.contextSize);
    const temperature = checkNumber('request.temperature', request.temperature, 1, 0, 1e6);
    const topP = checkNumber('request.topP', request.topP, 1, 0, 1);
    const n = checkInteger('request.n', request.n, 1, 1, 1024);
    const seed = checkInteger('request.seed', request.seed, 0, 0, 2 ** 31 - 1);
    if (prompt.length + maxTokens > this.#options.contextSize) {
      throw rangeError('request.promptTokenIds.length + request.maxTokens', `at most the context size ${this.#options.contextSize}`, prompt.length + maxTokens);
    }
    const stops = new Set(request.stopTokenIds ?? []);
    const id = `llama.cpp-${++this.#requests}`;
    const version = this.#version;
    const samples = await Promise.all(Array.from({ length: n }, async (_, index): Promise<TokenSample> => {
      const sequence = await this.#acquire();
      try {
        await sequence.clearHistory();
        const tokenIds: number[] = [];
        const logprobs: number[] = [];
        let finishReason = 'length';
        // One controlledEvaluate call per token, each awaited to the end: no evaluation is left
        // in flight on the sequence when it goes back to the pool. (Leaving node-llama-cpp's
        // evaluate generator early at a stop token let about 1 token in 300 of the next request
        // on that sequence be scored off by up to 3 nats.) Each step's sampler has its own seed.
        const sampling = { temperature, topP, topK: 0, minP: 0 };
        const step = (token: number, k: number): ControlledInput => [token, { generateNext: { token: true, confidence: true, options: { ...sampling, seed: (seed + n * k + index) % 2 ** 31 } } }];
        let input: ControlledInput[] = [...prompt.slice(0, -1), step(prompt[prompt.length - 1]!, 0)];
        while (tokenIds.length < maxTokens) {
          const outputs = await sequence.controlledEvaluate(input);
          const next = outputs[input.length - 1]?.next;
          if (next?.token === undefined || next.token === null || next.confidence === undefined) throw new Error('llama.cpp sampled no token');
          tokenIds.push(next.token);
          logprobs.push(Math.log(next.confidence));
          if (stops.has(next.token)) { finishReason = 'stop'; break; }
          input = [step(next.token, tokenIds.length)];
        }
        return { tokenIds, logprobs, text: this.#model.detokenize(tokenIds), finishReason };
      } finally {
        this.#release(sequence);
      }
    }));
    return { id, model: this.#modelPath, endpoint: 'llama.cpp (in process)', promptTokenIds: prompt, samples, weightVersion: String(version) };
  }

  /**
   * The engine's next-token log-probs after each prefix of `tokens` (temperature 1, no
   * truncation): row t is log p(· | tokens[0..t]), `[tokens.length][vocab]`.
   */
  async nextTokenLogprobs(tokens: readonly number[], vocabSize: number): Promise<Float64Array[]> {
    checkInteger('vocabSize', vocabSize, 1, 1, 1 << 24);
    const sequence = await this.#acquire();
    try {
      await sequence.clearHistory();
      const outputs = await sequence.controlledEvaluate(tokens.map((t) => [t, { generateNext: { probabilities: true } }]));
      await sequence.clearHistory();
      return outputs.map((output, t) => {
        const probabilities = output?.next.probabilities;
        if (!probabilities) throw new Error(`llama.cpp returned no probabilities at position ${t}`);
        const row = new Float64Array(vocabSize).fill(-Infinity);
        for (const [token, p] of probabilities) row[token] = Math.log(p);
        return row;
      });
    } finally {
      this.#release(sequence);
    }
  }

  /** Frees the model, the context and llama.cpp. */
  async close(): Promise<void> {
    await Promise.all(this.#contexts.map((context) => context.dispose()));
    await this.#model.dispose();
    await this.#llama.dispose();
  }
}
