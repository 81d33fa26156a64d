/**
 * The token-in/token-out client against `tirl serve` (the demo's real GRU policy) on
 * localhost: vLLM's /v1/completions and SGLang's /generate shapes (vLLM
 * vllm/entrypoints/openai/protocol.py at 0052bed3, SGLang http_server.py at 0025436e),
 * n > 1, errors, retries, load balancing, health checks, a concurrency limit, and a
 * multi-turn tool-calling agent whose trajectory trains on exactly the ids sampled.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { startServer, type RunningServer } from '../app/serve/server.js';
import { TOKEN, VOCAB, decode, encode } from '../app/demo/vocab.js';
import { ChatCompletionPolicy, MultiTurnReasoner, TokenAgentPolicy, type ParsedTurn } from '../lib/agents/index.js';
import { Role } from '../lib/kernels/index.js';
import { OpenAIChatClient, PolicyRequestError, TokenCompletionClient, type PoolStats } from '../lib/chat_client/index.js';
import { ToolRegistry } from '../lib/tools/registry.js';
import { packTrajectories, parseTrajectory, type ChatTemplate, type Tokenizer } from '../lib/trajectory/index.js';

const demoTokenizer: Tokenizer = {
  name: 'demo',
  vocabSize: VOCAB.length,
  specialTokens: Object.fromEntries(VOCAB.map((token, id) => [token, id]).filter(([token]) => String(token).startsWith('<'))),
  encode: (text) => encode(text),
  decode: (ids) => decode(ids),
  specialTokenId(text) {
    const id = this.specialTokens[text];
    if (id === undefined) throw new RangeError(text);
    return id;
  },
};

/** The demo's chat layout: BOS and the question, actions as sampled, tool output in `<out> … </out>`. */
const demoTemplate: ChatTemplate = {
  name: 'demo',
  prompt: (_system, prompt) => [{ special: '<bos>' }, { text: prompt }],
  action: (action) => [{ text: action.text }],
  response: (response) => [{ special: '<out>' }, { text: response.text }, { special: '</out>' }],
  nextTurn: () => [],
};

/** A local proxy in front of `target`: counts concurrent requests, records bodies and answers, and can fail the first attempts. */
async function proxy(target: string, failFirst: number, status = 503): Promise<{ url: string; server: Server; maxConcurrent: number; bodies: unknown[]; answers: unknown[]; attempts: number }> {
  const state = { url: '', server: undefined as unknown as Server, maxConcurrent: 0, bodies: [] as unknown[], answers: [] as unknown[], attempts: 0 };
  let concurrent = 0;
  state.server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      state.attempts++;
      if (req.url !== '/health' && state.attempts <= failFirst) {
        res.writeHead(status, { 'content-type': 'application/json', 'retry-after': '0' });
        res.end(JSON.stringify({ error: { message: 'overloaded', type: 'ServiceUnavailableError', param: null, code: status } }));
        return;
      }
      concurrent++;
      state.maxConcurrent = Math.max(state.maxConcurrent, concurrent);
      const body = Buffer.concat(chunks);
      if (body.length > 0) state.bodies.push(JSON.parse(body.toString('utf8')));
      const forward = httpRequest(target + req.url, { method: req.method, headers: { 'content-type': 'application/json' } }, (upstream) => {
        const parts: Buffer[] = [];
        upstream.on('data', (chunk: Buffer) => parts.push(chunk));
        upstream.on('end', () => {
          // Hold the answer a moment so concurrent requests overlap.
          setTimeout(() => {
            concurrent--;
            const text = Buffer.concat(parts).toString('utf8');
            if (text.length > 0 && req.url !== '/health') state.answers.push(JSON.parse(text));
            res.writeHead(upstream.statusCode ?? 500, { 'content-type': 'application/json' });
            res.end(text);
          }, 20);
        });
      });
      forward.end(body);
    });
  });
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`;
  return state;
}

/** A port nothing listens on: bound, then closed. */
async function deadPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}`;
}

const root = fileURLToPath(new URL('../..', import.meta.url));

describe('tirl serve and the token client', () => {
  let served: RunningServer;
  const closers: Array<() => Promise<void>> = [];
  before(async () => {
    served = await startServer({ port: 0, seed: 3 });
    closers.push(() => served.close());
  });
  after(async () => { for (const close of closers.reverse()) await close(); });
  const prompt = [TOKEN.bos, ...encode('what is 2 plus 3 ?')];

  test('vLLM /v1/completions: n samples of a token-id prompt, ids and log-probs back, the log-probs the model\'s own', async () => {
    const client = new TokenCompletionClient({ api: 'vllm', baseUrl: served.url, model: served.model });
    const completion = await client.complete({ promptTokenIds: prompt, maxTokens: 6, n: 4, seed: 11 });
    assert.equal(completion.samples.length, 4);
    assert.deepEqual(completion.promptTokenIds, prompt);
    const batch = { tokens: Int32Array.from(completion.samples.flatMap((s) => [...prompt, ...s.tokenIds])), seqOffsets: new Int32Array(5) };
    completion.samples.forEach((s, i) => { batch.seqOffsets[i + 1] = batch.seqOffsets[i]! + prompt.length + s.tokenIds.length; });
    const trainer = await served.policy.logprobs(batch);
    let worst = 0;
    completion.samples.forEach((s, i) => {
      assert.ok(s.tokenIds.length >= 1 && s.tokenIds.length <= 6);
      assert.equal(s.logprobs.length, s.tokenIds.length);
      assert.ok(s.finishReason === 'stop' || s.finishReason === 'length');
      s.logprobs.forEach((value, t) => { worst = Math.max(worst, Math.abs(value - trainer.logp[batch.seqOffsets[i]! + prompt.length + t]!)); });
    });
    assert.ok(worst < 1e-4, `rollout/trainer log-prob mismatch ${worst}`);
    // The same seed samples the same ids through SGLang's /generate.
    const sglang = new TokenCompletionClient({ api: 'sglang', baseUrl: served.url });
    const generated = await sglang.complete({ promptTokenIds: prompt, maxTokens: 6, n: 4, seed: 11 });
    assert.deepEqual(generated.samples.map((s) => s.tokenIds), completion.samples.map((s) => s.tokenIds));
    assert.deepEqual(generated.samples.map((s) => s.logprobs), completion.samples.map((s) => s.logprobs));
    assert.equal(generated.weightVersion, '0');
  });

  test('the wire shapes are the engines\': vLLM completion choices and SGLang meta_info', async () => {
    const post = async (path: string, body: unknown) => {
      const response = await fetch(served.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: response.status, body: await response.json() as any };
    };
    const vllm = await post('/v1/completions', { model: served.model, prompt, max_tokens: 3, logprobs: 1, return_tokens_as_token_ids: true, return_token_ids: true, seed: 5 });
    assert.equal(vllm.status, 200);
    assert.equal(vllm.body.object, 'text_completion');
    assert.match(vllm.body.id, /^cmpl-/);
    const choice = vllm.body.choices[0];
    assert.deepEqual(Object.keys(choice.logprobs).sort(), ['text_offset', 'token_logprobs', 'tokens', 'top_logprobs']);
    assert.deepEqual(choice.logprobs.tokens, choice.token_ids.map((id: number) => `token_id:${id}`));
    assert.deepEqual(choice.prompt_token_ids, prompt);
    assert.equal(vllm.body.usage.prompt_tokens, prompt.length);
    const sglang = await post('/generate', { input_ids: prompt, sampling_params: { max_new_tokens: 3, n: 2, sampling_seed: 5 }, return_logprob: true });
    assert.equal(sglang.status, 200);
    assert.equal(sglang.body.length, 2);
    assert.deepEqual(sglang.body[0].meta_info.output_token_logprobs.map((entry: unknown[]) => entry[1]), sglang.body[0].output_ids);
    assert.ok(['stop', 'length'].includes(sglang.body[0].meta_info.finish_reason.type));
    const models = await (await fetch(served.url + '/v1/models')).json() as any;
    assert.equal(models.data[0].id, served.model);
    const chat = await post('/v1/chat/completions', { model: served.model, messages: [{ role: 'user', content: 'what is 2 plus 3 ?' }], max_tokens: 3, logprobs: true, return_token_ids: true });
    assert.equal(chat.status, 200);
    assert.equal(chat.body.object, 'chat.completion');
    assert.deepEqual(chat.body.prompt_token_ids, prompt);
    assert.equal(chat.body.choices[0].logprobs.content.length, chat.body.choices[0].token_ids.length);
  });

  test('bad requests get each engine\'s error shape and status; the client keeps the message and does not retry them', async () => {
    const bad = await fetch(served.url + '/v1/completions', { method: 'POST', body: JSON.stringify({ model: served.model, prompt: [1, 9999], max_tokens: 2 }) });
    assert.equal(bad.status, 400);
    const body = await bad.json() as any;
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(body.error.type, 'BadRequestError');
    const missing = await fetch(served.url + '/v1/completions', { method: 'POST', body: JSON.stringify({ model: 'nope', prompt: [1] }) });
    assert.equal(missing.status, 404);
    assert.equal((await missing.json() as any).error.message, 'The model `nope` does not exist.');
    const sglang = await fetch(served.url + '/generate', { method: 'POST', body: JSON.stringify({ sampling_params: {} }) });
    assert.equal(sglang.status, 400);
    assert.deepEqual(await sglang.json(), { error: { message: 'Either text, input_ids or input_embeds should be provided.' } });

    const client = new TokenCompletionClient({ api: 'vllm', baseUrl: served.url, model: served.model, retryBaseMs: 1 });
    await assert.rejects(client.complete({ promptTokenIds: [1, 9999], maxTokens: 2 }), (error: unknown) => {
      assert.ok(error instanceof PolicyRequestError);
      assert.equal(error.status, 400);
      assert.match(error.message, /out of vocabulary/);
      return true;
    });
    assert.equal(client.stats().retries, 0);
    assert.throws(() => new TokenCompletionClient({ api: 'tgi' as 'vllm', baseUrl: served.url }), { name: 'TypeError', message: /options\.api/ });
    await assert.rejects(client.complete({ promptTokenIds: [], maxTokens: 2 }), { name: 'TypeError', message: /request\.promptTokenIds/ });
  });

  test('retries 429/503 with backoff, skips a dead endpoint, reports health, and holds the concurrency limit', async () => {
    const flaky = await proxy(served.url, 2, 503);
    closers.push(() => new Promise((resolve) => flaky.server.close(() => resolve())));
    const dead = await deadPort();
    const progress: PoolStats[] = [];
    const client = new TokenCompletionClient({
      api: 'sglang', endpoints: [dead, flaky.url], maxConcurrency: 2, retryBaseMs: 1, maxRetries: 6, unhealthyMs: 60_000,
      onProgress: (stats) => progress.push(stats),
    });
    const results = await Promise.all(Array.from({ length: 6 }, (_, k) => client.complete({ promptTokenIds: prompt, maxTokens: 4, seed: k })));
    assert.equal(results.length, 6);
    assert.ok(results.every((r) => r.endpoint === flaky.url));
    const stats = client.stats();
    assert.equal(stats.completed, 6);
    assert.ok(stats.retries >= 3, `retries ${stats.retries}`); // one on the dead endpoint, two 503s
    assert.ok(flaky.maxConcurrent <= 2, `max concurrent ${flaky.maxConcurrent}`);
    assert.ok(stats.completionTokens > 0 && stats.tokensPerSecond > 0);
    assert.equal(stats.endpoints.find((e) => e.url === dead)!.healthy, false);
    assert.equal(progress.length, 6);
    const health = await client.checkHealth(2_000);
    assert.deepEqual(health.map((e) => e.healthy), [false, true]);
  });

  test('a multi-turn tool-calling agent over HTTP trains on exactly the ids the server saw and sampled', async () => {
    const recorder = await proxy(served.url, 0);
    closers.push(() => new Promise((resolve) => recorder.server.close(() => resolve())));
    const client = new TokenCompletionClient({ api: 'vllm', baseUrl: recorder.url, model: served.model });
    // Every turn calls the tool `echo` with its text; turns end at any token from 'what' on, so they are short.
    const stopTokenIds = VOCAB.map((_, id) => id).filter((id) => id >= VOCAB.indexOf('what'));
    const parseToolCall = (text: string): ParsedTurn => ({ text, toolCall: { name: 'echo', arguments: JSON.stringify({ text: 'x' }) } });
    const policy = new TokenAgentPolicy(client, { tokenizer: demoTokenizer, template: demoTemplate, maxTokens: 40, seed: 7, stopTokenIds, parseToolCall, policyVersion: 2 });
    const tools = new ToolRegistry().register({
      name: 'echo', description: 'answers 7', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      call: async () => ({ status: 'success', result: '7' }),
    });
    const agent = new MultiTurnReasoner({ policy, tools, maxTurns: 3 });
    const trajectory = parseTrajectory(JSON.parse(JSON.stringify(await agent.run({ prompt: 'what is 2 plus 3 ?' }))));
    assert.equal(trajectory.turns.length, 3);
    assert.ok(trajectory.turns.every((turn) => turn.response?.toolName === 'echo' && turn.action.policyVersion === 2));
    const batch = packTrajectories([trajectory], { tokenizer: demoTokenizer, template: demoTemplate });
    assert.equal(batch.exact[0], 1);
    assert.equal(batch.policyVersions[0], 2);
    // What the server was sent and what it sampled, call by call.
    const sent = recorder.bodies as Array<{ prompt: number[] }>;
    const answered = recorder.answers as Array<{ choices: Array<{ token_ids: number[]; logprobs: { token_logprobs: number[] } }> }>;
    assert.equal(sent.length, 3);
    const last = [...sent[2]!.prompt, ...answered[2]!.choices[0]!.token_ids];
    // The last tool response, which no action read, is rendered after them.
    assert.deepEqual(Array.from(batch.tokens), [...last, TOKEN.out, ...encode('7'), TOKEN.outEnd]);
    for (let call = 1; call < 3; call++) {
      // Each context extends the previous one by exactly the sampled ids and the tool's response.
      const previous = [...sent[call - 1]!.prompt, ...answered[call - 1]!.choices[0]!.token_ids];
      assert.deepEqual(sent[call]!.prompt.slice(0, previous.length), previous);
      assert.deepEqual(sent[call]!.prompt.slice(previous.length), [TOKEN.out, ...encode('7'), TOKEN.outEnd]);
    }
    const actionLogprobs = Array.from(batch.behaviourLogprobs).filter((_, t) => batch.roles[t] === Role.action);
    assert.deepEqual(actionLogprobs, answered.flatMap((a) => a.choices[0]!.logprobs.token_logprobs).map(Math.fround));
    assert.equal(Array.from(batch.roles).filter((role) => role === Role.action).length, answered.reduce((n, a) => n + a.choices[0]!.token_ids.length, 0));
  });

  test('over chat completions, the agent keeps the prompt_token_ids and token_ids the server returns', async () => {
    const chat = new OpenAIChatClient({ baseUrl: `${served.url}/v1`, model: served.model });
    const policy = new ChatCompletionPolicy(chat, { maxTokens: 6, logprobs: true, returnTokenIds: true, seed: 3 });
    const trajectory = await new MultiTurnReasoner({ policy, maxTurns: 3 }).run({ prompt: 'what is 2 plus 3 ?' });
    assert.ok(trajectory.turns.length >= 2);
    assert.deepEqual(trajectory.promptTokenIds, prompt);
    assert.ok(trajectory.turns.every((turn) => turn.action.tokenIds !== undefined && turn.action.logprobs!.length === turn.action.tokenIds.length));
    // The server re-rendered each context from the messages; it extended the record exactly, so nothing drifted.
    assert.equal(trajectory.metadata?.contextDrift, undefined);
    const batch = packTrajectories([trajectory], { tokenizer: demoTokenizer, template: demoTemplate });
    assert.equal(batch.exact[0], 1);
  });

  test('npx tirl serve: --checkpoint serves a trained policy (the same log-probs), SIGTERM stops it, bad flags exit 2', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tirl-serve-'));
    closers.push(async () => rmSync(dir, { recursive: true, force: true }));
    await served.policy.saveState(dir);
    const child = spawn(process.execPath, [join(root, 'bin', 'tirl.js'), 'serve', '--port', '0', '--checkpoint', dir], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        output += chunk.toString('utf8');
        const match = /at (http:\/\/\S+) /.exec(output);
        if (match !== null) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`tirl serve exited with ${code}: ${output}`)));
    });
    const body = { model: 'tirl-demo', prompt, max_tokens: 5, seed: 9, logprobs: 0, return_token_ids: true };
    const ask = async (base: string) => (await (await fetch(`${base}/v1/completions`, { method: 'POST', body: JSON.stringify(body) })).json()) as { choices: Array<{ token_ids: number[]; logprobs: { token_logprobs: number[] } }> };
    const [fromCli, fromTest] = await Promise.all([ask(url), ask(served.url)]);
    assert.deepEqual(fromCli.choices[0]!.token_ids, fromTest.choices[0]!.token_ids);
    assert.deepEqual(fromCli.choices[0]!.logprobs.token_logprobs, fromTest.choices[0]!.logprobs.token_logprobs);
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    assert.equal(await exited, 0);
    for (const args of [['serve'], ['serve', '--port', '1', '--seed', '2', '--checkpoint', dir], ['serve', '--port', 'x']]) {
      const result = spawnSync(process.execPath, [join(root, 'bin', 'tirl.js'), ...args], { cwd: root, encoding: 'utf8' });
      assert.equal(result.status, 2, result.stderr);
      assert.match(result.stderr, /usage: tirl serve/);
    }
  });
});

