/**
 * Token in, token out: the prompt goes to the engine as token ids and the sampled ids come
 * back with their log-probs, so nothing is re-tokenised between rollout and training.
 *
 * Wire formats, as read from the engines' sources:
 * - vLLM (`vllm/entrypoints/openai/protocol.py`, v0.11 line, commit 0052bed3): `POST
 *   /v1/completions` with `prompt` as a list of ids, `logprobs` (top-k count; 0 gives the
 *   sampled token's), `return_tokens_as_token_ids` ("token_id:N" tokens), `return_token_ids`
 *   (choice `token_ids` and `prompt_token_ids`), `n`, `max_tokens`, `temperature`, `top_p`,
 *   `seed`, `stop_token_ids`, `stop`, `include_stop_str_in_output`, `skip_special_tokens`; the answer's `choices[i]` hold `text`,
 *   `logprobs.{tokens, token_logprobs, top_logprobs, text_offset}`, `finish_reason`, `token_ids`.
 * - SGLang (`python/sglang/srt/entrypoints/http_server.py`, commit 0025436e): `POST /generate`
 *   with `input_ids`, `sampling_params` (`max_new_tokens`, `temperature`, `top_p`, `n`,
 *   `stop_token_ids`, `stop`, `no_stop_trim`, `skip_special_tokens`, `sampling_seed`), `return_logprob`,
 *   `logprob_start_len` -1 (output tokens only); the answer (a list when n > 1) holds `text`,
 *   `output_ids` and `meta_info.{id, finish_reason.type, prompt_tokens, completion_tokens,
 *   output_token_logprobs: [[logprob, id, text|null], …], weight_version}`. Errors are
 *   `{ "error": { "message" } }` with status 400.
 */
import { PolicyRequestError } from './openai.js';
import { EndpointPool, type EndpointPoolOptions, type EndpointStats, type PoolStats } from './pool.js';
import { checkInteger, checkNonEmptyString, checkNumber, checkObject, typeError } from '../check.js';

/** Which engine's native token API to speak. */
export type TokenApi = 'vllm' | 'sglang';

/** One sampling request, prompt as token ids. */
export interface TokenSamplingRequest {
  /** The whole context as token ids. */
  promptTokenIds: readonly number[];
  /** Most tokens to generate. */
  maxTokens: number;
  /** Default 1. */
  temperature?: number;
  /** Default 1. */
  topP?: number;
  /** Samples of this prompt (default 1). */
  n?: number;
  seed?: number;
  /** Ids that end generation (the end-of-turn token); the engine's EOS applies too. */
  stopTokenIds?: readonly number[];
  /**
   * Strings that end generation once the sample's text ends with one (e.g. an output fence
   * after a code block). The sample keeps every id sampled, and its text keeps the string
   * (vLLM `stop` with `include_stop_str_in_output`, SGLang `stop` with `no_stop_trim`).
   */
  stop?: readonly string[];
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** One sampled continuation. */
export interface TokenSample {
  /** The ids as sampled, the stop token included when generation stopped on one. */
  tokenIds: number[];
  /** The engine's log-prob of each sampled id (natural log). */
  logprobs: number[];
  /** The engine's text of the sample (for logs; the ids are the record). */
  text: string;
  /** 'stop' or 'length' as the engine said; null if it did not. */
  finishReason: string | null;
}

/** The engine's answer to one request. */
export interface TokenCompletion {
  id: string;
  model: string;
  /** The endpoint that served it. */
  endpoint: string;
  /** The prompt ids as the engine read them (the request's when it did not echo them). */
  promptTokenIds: number[];
  /** `n` samples, in order. */
  samples: TokenSample[];
  /** SGLang's `weight_version` of the weights that sampled, when it reports one. */
  weightVersion?: string;
}

/** Anything that samples continuations of token-id prompts. */
export interface TokenPolicy {
  complete(request: TokenSamplingRequest): Promise<TokenCompletion>;
}

/** Options of {@link TokenCompletionClient}. */
export interface TokenCompletionClientOptions extends Omit<EndpointPoolOptions, 'endpoints'> {
  /** 'vllm' (`/v1/completions`) or 'sglang' (`/generate`). */
  api: TokenApi;
  /** Server roots, e.g. `['http://node1:8000', 'http://node2:8000']`; or one as `baseUrl`. */
  endpoints?: readonly string[];
  baseUrl?: string;
  /** Model name sent with each request; required for 'vllm' (SGLang's `/generate` takes none). */
  model?: string;
}

function idArray(value: unknown): number[] | undefined {
  return Array.isArray(value) && value.every((item) => Number.isInteger(item) && item >= 0) ? value as number[] : undefined;
}

const TOKEN_ID = /^token_id:(\d+)$/;

/**
 * A client of vLLM's or SGLang's token API (or `tirl serve`, which speaks both), over one
 * or several endpoints with retries, a concurrency limit and health checks (see
 * {@link EndpointPool}). Every sample comes back as ids with their log-probs.
 */
export class TokenCompletionClient implements TokenPolicy {
  readonly api: TokenApi;
  readonly #model: string | undefined;
  readonly #pool: EndpointPool;

  /** @throws TypeError or RangeError naming a bad option. */
  constructor(options: TokenCompletionClientOptions) {
    const checked = checkObject('options', options);
    if (checked.api !== 'vllm' && checked.api !== 'sglang') throw typeError('options.api', "'vllm' or 'sglang'", checked.api);
    this.api = checked.api;
    this.#model = checked.model === undefined ? undefined : checkNonEmptyString('options.model', checked.model);
    if (this.api === 'vllm' && this.#model === undefined) throw typeError('options.model', 'the served model name', undefined);
    const endpoints = checked.endpoints ?? (checked.baseUrl === undefined ? undefined : [checked.baseUrl]);
    const { api: _api, model: _model, baseUrl: _baseUrl, ...poolOptions } = options;
    this.#pool = new EndpointPool({ ...poolOptions, endpoints: endpoints as string[] });
  }

  /** Requests, retries, tokens per second and the endpoints' state. */
  stats(): PoolStats {
    return this.#pool.stats();
  }

  /** Probes every endpoint's `/health`. */
  checkHealth(timeoutMs?: number): Promise<EndpointStats[]> {
    return this.#pool.checkHealth(timeoutMs);
  }

  /**
   * Samples `n` continuations of the prompt. Rejects with a `PolicyRequestError` when the
   * engine refuses (its message kept), every retry failed, or the answer lacks ids or log-probs;
   * with a TypeError/RangeError for a bad request.
   */
  async complete(request: TokenSamplingRequest): Promise<TokenCompletion> {
    const checked = checkObject('request', request);
    const prompt = checked.promptTokenIds;
    if (!Array.isArray(prompt) || prompt.length === 0 || !prompt.every((id) => Number.isInteger(id) && id >= 0)) {
      throw typeError('request.promptTokenIds', 'a non-empty array of token ids', prompt);
    }
    const maxTokens = checkInteger('request.maxTokens', checked.maxTokens, 0, 1, 1 << 30);
    const temperature = checkNumber('request.temperature', checked.temperature, 1, 0, 100);
    const topP = checkNumber('request.topP', checked.topP, 1, 0, 1);
    const n = checkInteger('request.n', checked.n, 1, 1, 1024);
    const seed = checked.seed === undefined ? undefined : checkInteger('request.seed', checked.seed, 0, 0, Number.MAX_SAFE_INTEGER);
    const stop = checked.stopTokenIds === undefined ? [] : idArray(checked.stopTokenIds);
    if (stop === undefined) throw typeError('request.stopTokenIds', 'an array of token ids', checked.stopTokenIds);
    const stopStrings = checked.stop === undefined ? [] : checked.stop;
    if (!Array.isArray(stopStrings) || !stopStrings.every((item) => typeof item === 'string' && item !== '')) {
      throw typeError('request.stop', 'an array of non-empty strings', checked.stop);
    }
    const postOptions = {
      ...(request.signal === undefined ? {} : { signal: request.signal }),
      ...(request.timeoutMs === undefined ? {} : { timeoutMs: checkInteger('request.timeoutMs', request.timeoutMs, 0, 1, 86_400_000) }),
    };
    if (this.api === 'vllm') {
      const body: Record<string, unknown> = {
        model: this.#model, prompt: Array.from(prompt), max_tokens: maxTokens, temperature, top_p: topP, n,
        logprobs: 0, return_tokens_as_token_ids: true, return_token_ids: true, skip_special_tokens: false,
      };
      if (seed !== undefined) body.seed = seed;
      if (stop.length > 0) body.stop_token_ids = stop;
      if (stopStrings.length > 0) {
        body.stop = stopStrings.slice();
        body.include_stop_str_in_output = true;
      }
      const { body: answer, endpoint } = await this.#pool.post('/v1/completions', body, {
        ...postOptions,
        usage: (value) => {
          const usage = (value as { usage?: { prompt_tokens?: number; completion_tokens?: number } }).usage;
          return { prompt: Number(usage?.prompt_tokens ?? 0), completion: Number(usage?.completion_tokens ?? 0) };
        },
      });
      return parseVllmCompletion(answer, endpoint, prompt as number[], n);
    }
    const samplingParams: Record<string, unknown> = { max_new_tokens: maxTokens, temperature, top_p: topP, n, skip_special_tokens: false };
    if (stop.length > 0) samplingParams.stop_token_ids = stop;
    if (stopStrings.length > 0) {
      samplingParams.stop = stopStrings.slice();
      samplingParams.no_stop_trim = true;
    }
    if (seed !== undefined) samplingParams.sampling_seed = seed;
    const body = { input_ids: Array.from(prompt), sampling_params: samplingParams, return_logprob: true, logprob_start_len: -1 };
    const { body: answer, endpoint } = await this.#pool.post('/generate', body, {
      ...postOptions,
      usage: (value) => {
        const items = (Array.isArray(value) ? value : [value]) as Array<{ meta_info?: { prompt_tokens?: number; completion_tokens?: number } }>;
        return {
          prompt: Number(items[0]?.meta_info?.prompt_tokens ?? 0),
          completion: items.reduce((sum, item) => sum + Number(item?.meta_info?.completion_tokens ?? 0), 0),
        };
      },
    });
    return parseSglangGeneration(answer, endpoint, prompt as number[], n);
  }
}

function protocolError(endpoint: string, what: string, answer: unknown): PolicyRequestError {
  const body = JSON.stringify(answer);
  return new PolicyRequestError('protocol', `${endpoint} answered without ${what}: ${body.slice(0, 300)}`, { body });
}

/** Reads a vLLM `/v1/completions` answer. */
export function parseVllmCompletion(answer: unknown, endpoint: string, prompt: number[], n: number): TokenCompletion {
  const parsed = answer as { id?: unknown; model?: unknown; choices?: unknown };
  if (!Array.isArray(parsed?.choices) || parsed.choices.length !== n) throw protocolError(endpoint, `${n} choices`, answer);
  const choices = (parsed.choices as Array<Record<string, any>>).slice().sort((a, b) => Number(a.index ?? 0) - Number(b.index ?? 0));
  const samples = choices.map((choice, k): TokenSample => {
    const logprobs = choice.logprobs as { tokens?: unknown; token_logprobs?: unknown } | null | undefined;
    const values = logprobs?.token_logprobs;
    if (!Array.isArray(values) || !values.every((value) => typeof value === 'number')) {
      throw protocolError(endpoint, `choices[${k}].logprobs.token_logprobs (ask with logprobs)`, answer);
    }
    let tokenIds = idArray(choice.token_ids);
    if (tokenIds === undefined && Array.isArray(logprobs?.tokens)) {
      const fromTokens = (logprobs.tokens as unknown[]).map((token) => (typeof token === 'string' ? TOKEN_ID.exec(token) : null));
      if (fromTokens.every((match) => match !== null)) tokenIds = fromTokens.map((match) => Number(match![1]));
    }
    if (tokenIds === undefined) throw protocolError(endpoint, `choices[${k}].token_ids or "token_id:N" tokens`, answer);
    if (tokenIds.length !== values.length) throw protocolError(endpoint, `one log-prob per token in choices[${k}]`, answer);
    return { tokenIds: tokenIds.slice(), logprobs: (values as number[]).slice(), text: String(choice.text ?? ''), finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null };
  });
  const echoed = idArray(choices[0]?.prompt_token_ids);
  return { id: String(parsed.id ?? ''), model: String(parsed.model ?? ''), endpoint, promptTokenIds: (echoed ?? prompt).slice(), samples };
}

/** Reads an SGLang `/generate` answer (an object, or a list of n). */
export function parseSglangGeneration(answer: unknown, endpoint: string, prompt: number[], n: number): TokenCompletion {
  const items = (Array.isArray(answer) ? answer : [answer]) as Array<Record<string, any>>;
  if (items.length !== n) throw protocolError(endpoint, `${n} samples`, answer);
  let weightVersion: string | undefined;
  const samples = items.map((item, k): TokenSample => {
    const meta = item?.meta_info as Record<string, any> | undefined;
    const entries = meta?.output_token_logprobs;
    if (!Array.isArray(entries) || !entries.every((entry) => Array.isArray(entry) && typeof entry[0] === 'number' && Number.isInteger(entry[1]))) {
      throw protocolError(endpoint, `meta_info.output_token_logprobs in sample ${k} (ask with return_logprob)`, answer);
    }
    const tokenIds = idArray(item.output_ids) ?? entries.map((entry) => entry[1] as number);
    if (tokenIds.length !== entries.length) throw protocolError(endpoint, `one log-prob per output id in sample ${k}`, answer);
    if (meta!.weight_version !== undefined) weightVersion = String(meta!.weight_version);
    const finish = meta!.finish_reason;
    return {
      tokenIds: tokenIds.slice(),
      logprobs: entries.map((entry) => entry[0] as number),
      text: String(item.text ?? ''),
      finishReason: typeof finish === 'object' && finish !== null && typeof finish.type === 'string' ? finish.type : typeof finish === 'string' ? finish : null,
    };
  });
  const completion: TokenCompletion = { id: String(items[0]?.meta_info?.id ?? ''), model: '', endpoint, promptTokenIds: prompt.slice(), samples };
  if (weightVersion !== undefined) completion.weightVersion = weightVersion;
  return completion;
}
