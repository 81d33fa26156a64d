/**
 * `tirl serve`: the demo's policy (the GRU language model of `tirl demo`) behind an HTTP
 * server that answers in vLLM's and SGLang's own formats, with its own log-probs, so the
 * token-in/token-out client is tested against a real model over real HTTP.
 *
 * vLLM (shapes of `vllm/entrypoints/openai/protocol.py`, v0.11 line, commit 0052bed3):
 * `GET /v1/models`, `POST /v1/completions` (prompt as text, ids or a list of id lists; `n`,
 * `max_tokens` default 16, `temperature`, `top_p`, `seed`, `logprobs`, `stop_token_ids`,
 * `return_tokens_as_token_ids`, `return_token_ids`, `stop` strings with `include_stop_str_in_output`),
 * `POST /v1/chat/completions`, `GET /health`;
 * errors `{ error: { message, type, param, code } }`, 400 BadRequestError / 404 NotFoundError.
 * SGLang (`python/sglang/srt/entrypoints/http_server.py`, commit 0025436e): `POST /generate`
 * (`text` or `input_ids`, `sampling_params` with `max_new_tokens` default 128, `temperature`,
 * `top_p`, `n`, `stop_token_ids`, `stop` with `no_stop_trim`, `sampling_seed`; `return_logprob`,
 * `top_logprobs_num`),
 * `GET /get_model_info`; errors `{ error: { message } }` with 400.
 *
 * As in both engines, generation stops by default only at the end-of-sequence token (`</ans>`);
 * tool markup such as `</calc>` ends a turn only when the request asks for it. A stop string
 * ends a sample once its text ends with it; the ids keep every sampled token, and the text
 * drops the stop string unless `include_stop_str_in_output` (vLLM) or `no_stop_trim` (SGLang).
 *
 * Log-probs are the model's own (temperature 1, before top-p), which is what the trainer
 * scores; vLLM's default `logprobs_mode` reports the same raw log-probs.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import * as tf from '@tensorflow/tfjs';
import { DEFAULT_CONFIG } from '../demo/index.js';
import { DemoPolicy } from '../demo/policy.js';
import { TOKEN, VOCAB, VOCAB_SIZE, decode, encode } from '../demo/vocab.js';
import { SeededRandom } from '../../lib/index.js';

/** Options of {@link startServer}. */
export interface ServeOptions {
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Address to listen on. Default 127.0.0.1. */
  host?: string;
  /** A directory a demo policy's `saveState` wrote (a trained policy); else a fresh one. */
  checkpoint?: string;
  /**
   * A demo policy of this process to serve instead (not with `checkpoint`): the server samples
   * with its current weights, so training it changes what the server answers.
   */
  policy?: DemoPolicy;
  /** Seed of the fresh policy's weights and of requests without a seed. Default 1. */
  seed?: number;
  /** The served model's name. Default "tirl-demo". */
  model?: string;
  /** The weights' version, reported as SGLang's `weight_version`. Default "0". */
  weightVersion?: string;
}

/** A running server. */
export interface RunningServer {
  /** `http://host:port`, no trailing slash. */
  url: string;
  port: number;
  model: string;
  /** The policy being served (its log-probs are the server's). */
  policy: DemoPolicy;
  close(): Promise<void>;
}

/** A request the engines' schemas reject: answered with the engine's error shape. */
class BadRequest extends Error {
  constructor(message: string, readonly status = 400, readonly param: string | null = null) {
    super(message);
  }
}

interface Sampling {
  maxTokens: number;
  temperature: number;
  topP: number;
  n: number;
  stop: Set<number>;
  /** Stop strings, and whether the text keeps the one that matched. */
  stopStrings: string[];
  keepStopString: boolean;
  random: () => number;
  topLogprobs: number;
}

interface Sample {
  tokenIds: number[];
  logprobs: number[];
  top: Array<Array<[number, number]>>;
  finish: 'stop' | 'length';
  /** What stopped it: a stop token id (null for EOS), or the stop string. */
  stopToken: number | string | null;
  text: string;
}

const EOS = TOKEN.ansEnd;
const MAX_MODEL_LEN = 4096;

/** Starts the server; resolves once it listens. */
export async function startServer(options: ServeOptions): Promise<RunningServer> {
  const seed = options.seed ?? 1;
  const model = options.model ?? 'tirl-demo';
  const weightVersion = options.weightVersion ?? '0';
  await initBackend();
  if (options.policy !== undefined && options.checkpoint !== undefined) throw new RangeError('startServer: give options.policy or options.checkpoint, not both');
  const policy = options.policy ?? new DemoPolicy({ hidden: DEFAULT_CONFIG.hidden, learningRate: DEFAULT_CONFIG.learningRate, rng: new SeededRandom(seed) });
  if (options.checkpoint !== undefined) await policy.loadState(options.checkpoint);
  const serverRandom = new SeededRandom(seed + 1);
  let queue: Promise<unknown> = Promise.resolve();
  // One request at a time: the model runs on this thread, and order keeps seeds reproducible.
  const serial = <T>(work: () => Promise<T>): Promise<T> => {
    const run = queue.then(work, work);
    queue = run.catch(() => undefined);
    return run;
  };
  const context = { policy, model, weightVersion, serverRandom, created: Math.floor(Date.now() / 1000) };

  const server: Server = createServer((request, response) => {
    handle(request, response, context, serial).catch((error: unknown) => {
      send(response, 500, { error: { message: error instanceof Error ? error.message : String(error), type: 'InternalServerError', param: null, code: 500 } });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '127.0.0.1', () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    model,
    policy,
    close: () => new Promise<void>((resolve, reject) => {
      server.close((error) => (error ? reject(error) : resolve()));
      server.closeAllConnections();
    }),
  };
}

/** Loads the tfjs backend the server runs on: wasm where it starts, else cpu. */
export async function initBackend(): Promise<void> {
  try {
    await import('@tensorflow/tfjs-backend-wasm');
    if (await tf.setBackend('wasm')) { await tf.ready(); return; }
  } catch {
    // the cpu backend below
  }
  await tf.setBackend('cpu');
  await tf.ready();
}

type Context = { policy: DemoPolicy; model: string; weightVersion: string; serverRandom: SeededRandom; created: number };

async function handle(request: IncomingMessage, response: ServerResponse, context: Context, serial: <T>(work: () => Promise<T>) => Promise<T>): Promise<void> {
  const path = (request.url ?? '/').split('?')[0];
  const sglang = path === '/generate';
  const fail = (error: unknown) => {
    if (!(error instanceof BadRequest)) throw error;
    if (sglang) send(response, error.status, { error: { message: error.message } });
    else send(response, error.status, { error: { message: error.message, type: error.status === 404 ? 'NotFoundError' : 'BadRequestError', param: error.param, code: error.status } });
  };
  if (request.method === 'GET') {
    if (path === '/health' || path === '/health_generate') { response.writeHead(200).end(); return; }
    if (path === '/v1/models') {
      send(response, 200, { object: 'list', data: [{ id: context.model, object: 'model', created: context.created, owned_by: 'tirl', root: context.model, parent: null, max_model_len: MAX_MODEL_LEN, permission: [] }] });
      return;
    }
    if (path === '/get_model_info') {
      send(response, 200, { model_path: context.model, tokenizer_path: context.model, is_generation: true, preferred_sampling_params: null, weight_version: context.weightVersion });
      return;
    }
  }
  const routes: Record<string, (body: Record<string, unknown>) => Promise<unknown>> = {
    '/v1/completions': (body) => completions(body, context),
    '/v1/chat/completions': (body) => chatCompletions(body, context),
    '/generate': (body) => generate(body, context),
  };
  const route = routes[path];
  if (route === undefined) {
    send(response, 404, { detail: 'Not Found' });
    return;
  }
  if (request.method !== 'POST' && !(sglang && request.method === 'PUT')) {
    send(response, 405, { detail: 'Method Not Allowed' });
    return;
  }
  let body: Record<string, unknown>;
  try {
    const text = await readBody(request);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new BadRequest('The request body is not valid JSON');
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new BadRequest('The request body must be a JSON object');
    body = parsed as Record<string, unknown>;
    send(response, 200, await serial(() => route(body)));
  } catch (error) {
    fail(error);
  }
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > 64 << 20) { reject(new BadRequest('The request body is larger than 64 MiB', 413)); request.destroy(); return; }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

function send(response: ServerResponse, status: number, body: unknown): void {
  if (response.headersSent) return;
  const text = JSON.stringify(body);
  response.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

const id = (prefix: string) => `${prefix}${randomBytes(16).toString('hex')}`;

function integer(body: Record<string, unknown>, name: string, fallback: number, min: number, max: number): number {
  const value = body[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value)) throw new BadRequest(`${name}: Input should be a valid integer, got ${JSON.stringify(value)}`, 400, name);
  if (value < min || value > max) throw new BadRequest(`${name} must be in [${min}, ${max}], got ${value}.`, 400, name);
  return value;
}

function number(body: Record<string, unknown>, name: string, fallback: number, min: number, max: number): number {
  const value = body[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new BadRequest(`${name}: Input should be a valid number, got ${JSON.stringify(value)}`, 400, name);
  if (value < min || value > max) throw new BadRequest(`${name} must be in [${min}, ${max}], got ${value}.`, 400, name);
  return value;
}

function tokenIds(value: unknown, name: string): number[] {
  if (!Array.isArray(value) || value.length === 0 || !value.every((item) => Number.isInteger(item))) {
    throw new BadRequest(`${name} must be a non-empty list of token ids`, 400, name);
  }
  for (const item of value as number[]) {
    if (item < 0 || item >= VOCAB_SIZE) throw new BadRequest(`Token id ${item} is out of vocabulary (size ${VOCAB_SIZE})`, 400, name);
  }
  return value as number[];
}

function encodeText(text: unknown, name: string, withBos: boolean): number[] {
  if (typeof text !== 'string') throw new BadRequest(`${name} must be a string`, 400, name);
  try {
    return withBos ? [TOKEN.bos, ...encode(text)] : encode(text);
  } catch (error) {
    throw new BadRequest(`${name}: ${(error as Error).message}`, 400, name);
  }
}

function checkModel(body: Record<string, unknown>, context: Context): void {
  if (body.model !== undefined && body.model !== null && body.model !== context.model) {
    throw new BadRequest(`The model \`${String(body.model)}\` does not exist.`, 404, 'model');
  }
}

function stopSet(value: unknown, name: string): Set<number> {
  const stop = new Set<number>([EOS]);
  if (value === undefined || value === null) return stop;
  if (!Array.isArray(value)) throw new BadRequest(`${name} must be a list of token ids`, 400, name);
  for (const item of value) {
    if (!Number.isInteger(item) || item < 0 || item >= VOCAB_SIZE) throw new BadRequest(`${name}: ${JSON.stringify(item)} is not a token id`, 400, name);
    stop.add(item as number);
  }
  return stop;
}

/** vLLM's and SGLang's `stop`: a string or a list of strings. */
function stopStrings(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list) || !list.every((item) => typeof item === 'string' && item !== '')) {
    throw new BadRequest('stop must be a string or a list of non-empty strings', 400, 'stop');
  }
  return list as string[];
}

function randomOf(seed: number | undefined, context: Context): () => number {
  const random = seed === undefined ? context.serverRandom : new SeededRandom(seed);
  return () => random.next();
}

/** Samples `n` continuations of one prompt, batched, carrying the GRU state token by token. */
function sample(policy: DemoPolicy, prompt: readonly number[], sampling: Sampling): Sample[] {
  const n = sampling.n;
  const samples: Sample[] = Array.from({ length: n }, () => ({ tokenIds: [], logprobs: [], top: [], finish: 'length', stopToken: null, text: '' }));
  const open = new Array<boolean>(n).fill(true);
  const prefix = Int32Array.from(prompt.slice(0, -1));
  let state = policy.network.readContexts(Array.from({ length: n }, () => prefix));
  const inputs = new Int32Array(n).fill(prompt[prompt.length - 1]!);
  for (let step = 0; step < sampling.maxTokens && open.some(Boolean); step++) {
    const { logits, state: next } = policy.network.step(inputs, state);
    const values = logits.dataSync() as Float32Array;
    tf.dispose([logits, state]);
    state = next;
    for (let i = 0; i < n; i++) {
      if (!open[i]) continue;
      const row = values.subarray(i * VOCAB_SIZE, (i + 1) * VOCAB_SIZE);
      const logp = logSoftmax(row, 1);
      const token = draw(row, sampling);
      const out = samples[i]!;
      out.tokenIds.push(token);
      out.logprobs.push(logp[token]!);
      if (sampling.topLogprobs > 0) out.top.push(topK(logp, sampling.topLogprobs));
      inputs[i] = token;
      if (sampling.stop.has(token)) {
        open[i] = false;
        out.finish = 'stop';
        out.stopToken = token === EOS ? null : token;
      } else if (sampling.stopStrings.length > 0) {
        const text = decode(out.tokenIds);
        const matched = sampling.stopStrings.find((stop) => text.endsWith(stop));
        if (matched !== undefined) {
          open[i] = false;
          out.finish = 'stop';
          out.stopToken = matched;
        }
      }
    }
  }
  state.dispose();
  for (const out of samples) {
    const text = decode(out.tokenIds);
    out.text = typeof out.stopToken === 'string' && !sampling.keepStopString ? text.slice(0, text.length - out.stopToken.length).trimEnd() : text;
  }
  return samples;
}

function logSoftmax(row: ArrayLike<number>, temperature: number): Float64Array {
  const out = new Float64Array(row.length);
  let max = -Infinity;
  for (let v = 0; v < row.length; v++) max = Math.max(max, row[v]! / temperature);
  let total = 0;
  for (let v = 0; v < row.length; v++) total += Math.exp(row[v]! / temperature - max);
  const log = Math.log(total);
  for (let v = 0; v < row.length; v++) out[v] = row[v]! / temperature - max - log;
  return out;
}

/** Draws a token at the temperature, within the top-p nucleus; greedy at temperature 0. */
function draw(row: Float32Array, sampling: Sampling): number {
  if (sampling.temperature === 0) {
    let best = 0;
    for (let v = 1; v < row.length; v++) if (row[v]! > row[best]!) best = v;
    return best;
  }
  const logp = logSoftmax(row, sampling.temperature);
  const order = Array.from(logp.keys()).sort((a, b) => logp[b]! - logp[a]! || a - b);
  let kept = order.length;
  if (sampling.topP < 1) {
    let mass = 0;
    for (let k = 0; k < order.length; k++) {
      mass += Math.exp(logp[order[k]!]!);
      if (mass >= sampling.topP) { kept = k + 1; break; }
    }
  }
  let total = 0;
  for (let k = 0; k < kept; k++) total += Math.exp(logp[order[k]!]!);
  let u = sampling.random() * total;
  for (let k = 0; k < kept; k++) {
    u -= Math.exp(logp[order[k]!]!);
    if (u < 0) return order[k]!;
  }
  return order[kept - 1]!;
}

function topK(logp: Float64Array, k: number): Array<[number, number]> {
  return Array.from(logp.keys()).sort((a, b) => logp[b]! - logp[a]! || a - b).slice(0, k).map((token) => [token, logp[token]!]);
}

function tokenText(token: number, asIds: boolean): string {
  return asIds ? `token_id:${token}` : VOCAB[token]!;
}

function checkPromptLength(prompt: readonly number[], maxTokens: number): void {
  if (prompt.length + maxTokens > MAX_MODEL_LEN) {
    throw new BadRequest(`This model's maximum context length is ${MAX_MODEL_LEN} tokens. However, you requested ${prompt.length + maxTokens} tokens (${prompt.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`, 400, 'input_tokens');
  }
}

/** Sampling settings from a request: its field names differ between the engines. */
function samplingOf(params: Record<string, unknown>, names: { seed: string; keepStop: string }, maxTokens: number, topLogprobs: number, context: Context): Sampling {
  const seed = params[names.seed];
  return {
    maxTokens,
    temperature: number(params, 'temperature', 1, 0, 100),
    topP: number(params, 'top_p', 1, 1e-9, 1),
    n: integer(params, 'n', 1, 1, 128),
    stop: stopSet(params.stop_token_ids, 'stop_token_ids'),
    stopStrings: stopStrings(params.stop),
    keepStopString: params[names.keepStop] === true,
    random: randomOf(seed === undefined || seed === null ? undefined : integer(params, names.seed, 0, -(2 ** 53), 2 ** 53), context),
    topLogprobs,
  };
}

/** vLLM `/v1/completions`. */
async function completions(body: Record<string, unknown>, context: Context): Promise<unknown> {
  checkModel(body, context);
  if (body.stream === true) throw new BadRequest('stream is not supported by tirl serve', 400, 'stream');
  if (body.prompt === undefined || body.prompt === null) throw new BadRequest('At least one of `prompt` or `prompt_embeds` must be set.', 400, 'prompt');
  const prompts: number[][] = typeof body.prompt === 'string'
    ? [encodeText(body.prompt, 'prompt', true)]
    : Array.isArray(body.prompt) && body.prompt.length > 0 && Array.isArray(body.prompt[0])
      ? body.prompt.map((ids, i) => tokenIds(ids, `prompt[${i}]`))
      : [tokenIds(body.prompt, 'prompt')];
  const logprobs = body.logprobs === undefined || body.logprobs === null ? null : integer(body, 'logprobs', 0, 0, 20);
  const maxTokens = integer(body, 'max_tokens', 16, 1, MAX_MODEL_LEN);
  const sampling = samplingOf(body, { seed: 'seed', keepStop: 'include_stop_str_in_output' }, maxTokens, logprobs ?? 0, context);
  const asIds = body.return_tokens_as_token_ids === true;
  const withIds = body.return_token_ids === true;
  const choices: unknown[] = [];
  let promptTokens = 0;
  let completionTokens = 0;
  prompts.forEach((prompt) => checkPromptLength(prompt, maxTokens));
  prompts.forEach((prompt, p) => {
    promptTokens += prompt.length;
    sample(context.policy, prompt, sampling).forEach((s, k) => {
      completionTokens += s.tokenIds.length;
      const text = s.text;
      const choice: Record<string, unknown> = {
        index: p * sampling.n + k,
        text,
        logprobs: logprobs === null ? null : {
          text_offset: offsets(s.tokenIds),
          token_logprobs: s.logprobs,
          tokens: s.tokenIds.map((token) => tokenText(token, asIds)),
          top_logprobs: s.tokenIds.map((token, t) => Object.fromEntries([[tokenText(token, asIds), s.logprobs[t]!], ...(s.top[t] ?? []).map(([candidate, value]) => [tokenText(candidate, asIds), value] as const)])),
        },
        finish_reason: s.finish,
        stop_reason: s.stopToken,
        prompt_logprobs: null,
      };
      if (withIds) {
        choice.token_ids = s.tokenIds;
        choice.prompt_token_ids = prompt;
      }
      choices.push(choice);
    });
  });
  return {
    id: id('cmpl-'), object: 'text_completion', created: Math.floor(Date.now() / 1000), model: context.model, choices,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens + completionTokens, completion_tokens: completionTokens, prompt_tokens_details: null },
  };
}

/** Character offsets of each token in the decoded text. */
function offsets(ids: readonly number[]): number[] {
  const out: number[] = [];
  for (let t = 0; t < ids.length; t++) out.push(decode(ids.slice(0, t)).length + (t > 0 ? 1 : 0));
  return out;
}

/** The demo's chat format: BOS and the user's text, the assistant's actions, tool output as `<out> … </out>`. */
function chatContext(messages: unknown): number[] {
  if (!Array.isArray(messages) || messages.length === 0) throw new BadRequest('messages must be a non-empty list', 400, 'messages');
  const ids: number[] = [];
  messages.forEach((message, i) => {
    if (message === null || typeof message !== 'object') throw new BadRequest(`messages[${i}] must be an object`, 400, 'messages');
    const { role, content } = message as { role?: unknown; content?: unknown };
    const text = content === null || content === undefined ? '' : content;
    if (role === 'system') return;
    if (role === 'user') ids.push(...encodeText(text, `messages[${i}].content`, ids.length === 0));
    else if (role === 'assistant') ids.push(...encodeText(text, `messages[${i}].content`, false));
    else if (role === 'tool') ids.push(TOKEN.out, ...encodeText(text, `messages[${i}].content`, false), TOKEN.outEnd);
    else throw new BadRequest(`messages[${i}].role must be 'system', 'user', 'assistant' or 'tool'`, 400, 'messages');
  });
  if (ids.length === 0) throw new BadRequest('messages hold no user message', 400, 'messages');
  return ids;
}

/** vLLM `/v1/chat/completions` (non-streaming). */
async function chatCompletions(body: Record<string, unknown>, context: Context): Promise<unknown> {
  checkModel(body, context);
  if (body.stream === true) throw new BadRequest('stream is not supported by tirl serve', 400, 'stream');
  const prompt = chatContext(body.messages);
  const maxTokens = integer(body, 'max_completion_tokens', integer(body, 'max_tokens', MAX_MODEL_LEN - prompt.length, 1, MAX_MODEL_LEN), 1, MAX_MODEL_LEN);
  checkPromptLength(prompt, maxTokens);
  const wantLogprobs = body.logprobs === true;
  const sampling = samplingOf(body, { seed: 'seed', keepStop: 'include_stop_str_in_output' }, maxTokens, wantLogprobs ? integer(body, 'top_logprobs', 0, 0, 20) : 0, context);
  const asIds = body.return_tokens_as_token_ids === true;
  const withIds = body.return_token_ids === true;
  let completionTokens = 0;
  const choices = sample(context.policy, prompt, sampling).map((s, k) => {
    completionTokens += s.tokenIds.length;
    const choice: Record<string, unknown> = {
      index: k,
      message: { role: 'assistant', content: s.text, reasoning_content: null, tool_calls: [] },
      logprobs: wantLogprobs ? {
        content: s.tokenIds.map((token, t) => ({
          token: tokenText(token, asIds), logprob: s.logprobs[t], bytes: Array.from(Buffer.from(VOCAB[token]!, 'utf8')),
          top_logprobs: (s.top[t] ?? []).map(([candidate, value]) => ({ token: tokenText(candidate, asIds), logprob: value, bytes: Array.from(Buffer.from(VOCAB[candidate]!, 'utf8')) })),
        })),
      } : null,
      finish_reason: s.finish,
      stop_reason: s.stopToken,
    };
    if (withIds) choice.token_ids = s.tokenIds;
    return choice;
  });
  const answer: Record<string, unknown> = {
    id: id('chatcmpl-'), object: 'chat.completion', created: Math.floor(Date.now() / 1000), model: context.model, choices,
    usage: { prompt_tokens: prompt.length, total_tokens: prompt.length + completionTokens, completion_tokens: completionTokens, prompt_tokens_details: null },
    prompt_logprobs: null,
  };
  if (withIds) answer.prompt_token_ids = prompt;
  return answer;
}

/** SGLang `/generate`. */
async function generate(body: Record<string, unknown>, context: Context): Promise<unknown> {
  if (body.stream === true) throw new BadRequest('stream is not supported by tirl serve');
  const hasText = body.text !== undefined && body.text !== null;
  const hasIds = body.input_ids !== undefined && body.input_ids !== null;
  if (hasText === hasIds) throw new BadRequest(hasText ? 'Either text or input_ids should be provided, not both.' : 'Either text, input_ids or input_embeds should be provided.');
  const prompt = hasText ? encodeText(body.text, 'text', true) : tokenIds(body.input_ids, 'input_ids');
  const params = body.sampling_params ?? {};
  if (params === null || typeof params !== 'object' || Array.isArray(params)) throw new BadRequest('sampling_params must be an object');
  const p = params as Record<string, unknown>;
  const maxTokens = integer(p, 'max_new_tokens', 128, 0, MAX_MODEL_LEN);
  checkPromptLength(prompt, maxTokens);
  const returnLogprob = body.return_logprob === true;
  const sampling = samplingOf(p, { seed: 'sampling_seed', keepStop: 'no_stop_trim' }, maxTokens, returnLogprob ? integer(body, 'top_logprobs_num', 0, 0, 20) : 0, context);
  const started = Date.now();
  const rid = typeof body.rid === 'string' ? body.rid : randomBytes(16).toString('hex');
  const items = sample(context.policy, prompt, sampling).map((s, k) => {
    const meta: Record<string, unknown> = {
      id: sampling.n === 1 ? rid : `${rid}-${k}`,
      finish_reason: s.finish === 'stop' ? { type: 'stop', matched: typeof s.stopToken === 'string' ? s.stopToken : s.tokenIds[s.tokenIds.length - 1] } : { type: 'length', length: s.tokenIds.length },
      prompt_tokens: prompt.length,
      weight_version: context.weightVersion,
      completion_tokens: s.tokenIds.length,
      cached_tokens: 0,
      e2e_latency: (Date.now() - started) / 1000,
    };
    if (returnLogprob) {
      meta.input_token_logprobs = [];
      meta.output_token_logprobs = s.tokenIds.map((token, t) => [s.logprobs[t], token, null]);
      if (sampling.topLogprobs > 0) {
        meta.input_top_logprobs = [];
        meta.output_top_logprobs = s.top.map((candidates) => candidates.map(([token, value]) => [value, token, null]));
      }
    }
    return { text: s.text, output_ids: s.tokenIds, meta_info: meta };
  });
  return sampling.n === 1 ? items[0] : items;
}
