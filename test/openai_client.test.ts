import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, test } from 'node:test';
import { OpenAIChatClient, PolicyRequestError, type ChatDelta } from '../lib/chat_client/index.js';
import { ToolRegistry } from '../lib/tools/index.js';

type Handler = (body: Record<string, any>, response: ServerResponse, request: IncomingMessage) => void;

/** A loopback server speaking the chat-completions wire format as the test's handler says. */
let server: Server;
let baseUrl: string;
let handler: Handler;
let lastBody: Record<string, any>;
let lastHeaders: IncomingMessage['headers'];

function sendJson(response: ServerResponse, status: number, value: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(value));
}

/** Writes server-sent events, one `data:` line each, with a pause between writes so the
 * client sees them in separate reads; `pieces` are raw text to write as given. */
async function sendEvents(response: ServerResponse, pieces: string[]): Promise<void> {
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  for (const piece of pieces) {
    response.write(piece);
    await new Promise((done) => setTimeout(done, 2));
  }
  response.end();
}

const event = (value: unknown): string => `data: ${JSON.stringify(value)}\n\n`;

function chunk(delta: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: 'chatcmpl-7', object: 'chat.completion.chunk', created: 1, model: 'qwen',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: null, ...extra }],
  };
}

before(async () => {
  server = createServer((request, response) => {
    let text = '';
    request.setEncoding('utf8');
    request.on('data', (piece: string) => { text += piece; });
    request.on('end', () => {
      lastBody = JSON.parse(text) as Record<string, any>;
      lastHeaders = request.headers;
      assert.equal(request.method, 'POST');
      assert.equal(request.url, '/v1/chat/completions');
      handler(lastBody, response, request);
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise((done) => server.close(done));
});

beforeEach(() => {
  handler = () => { throw new Error('no handler set'); };
});

const messages = [{ role: 'user' as const, content: 'What is 6 * 7?' }];

describe('OpenAIChatClient, non-streaming', () => {
  test('sends the request in the wire format and reads text, token ids and log-probs (vLLM)', async () => {
    handler = (_body, response) => sendJson(response, 200, {
      id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'qwen',
      prompt_token_ids: [1, 2, 3],
      choices: [{
        index: 0,
        message: { role: 'assistant', content: '42', reasoning_content: 'six sevens', tool_calls: [] },
        logprobs: {
          content: [
            { token: 'token_id:19', logprob: -0.25, bytes: [52], top_logprobs: [{ token: 'token_id:19', logprob: -0.25 }, { token: 'token_id:20', logprob: -1.5 }] },
            { token: 'token_id:17', logprob: -0.5, bytes: [50], top_logprobs: [] },
          ],
        },
        finish_reason: 'stop',
        token_ids: [19, 17],
      }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
    const registry = new ToolRegistry().register({
      name: 'python', description: 'runs code', parameters: { type: 'object', properties: { code: { type: 'string' } } },
      call: async () => ({ status: 'success' }),
    });
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen', apiKey: 'sk-local', headers: { 'X-Trace': 'abc' } });
    const completion = await client.chat({
      messages, tools: registry.toOpenAITools(), toolChoice: 'auto', temperature: 0.7, topP: 0.9, maxTokens: 64,
      stop: ['</answer>'], seed: 5, topLogprobs: 2, returnTokenIds: true, extraBody: { repetition_penalty: 1.1 },
    });
    assert.deepEqual(lastBody, {
      model: 'qwen', messages, tools: registry.toOpenAITools(), tool_choice: 'auto', temperature: 0.7, top_p: 0.9,
      max_tokens: 64, stop: ['</answer>'], seed: 5, logprobs: true, top_logprobs: 2,
      return_tokens_as_token_ids: true, return_token_ids: true, repetition_penalty: 1.1,
    });
    assert.equal(lastHeaders.authorization, 'Bearer sk-local');
    assert.equal(lastHeaders['x-trace'], 'abc');
    assert.deepEqual(completion, {
      id: 'chatcmpl-1', model: 'qwen', content: '42', reasoning: 'six sevens', toolCalls: [], finishReason: 'stop',
      logprobs: [
        { token: 'token_id:19', tokenId: 19, logprob: -0.25, topLogprobs: [
          { token: 'token_id:19', tokenId: 19, logprob: -0.25 }, { token: 'token_id:20', tokenId: 20, logprob: -1.5 }] },
        { token: 'token_id:17', tokenId: 17, logprob: -0.5, topLogprobs: [] },
      ],
      tokenIds: [19, 17],
      promptTokenIds: [1, 2, 3],
      usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5 },
    });
  });

  test('reads tool calls and sends tool results back in the wire format', async () => {
    handler = (_body, response) => sendJson(response, 200, {
      id: 'chatcmpl-2', model: 'qwen',
      choices: [{
        index: 0, finish_reason: 'tool_calls', logprobs: null,
        message: {
          role: 'assistant', content: null,
          tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'python', arguments: '{"code": "print(6*7)"}' } }],
        },
      }],
    });
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen' });
    const completion = await client.chat({ messages });
    assert.equal(completion.content, null);
    assert.equal(completion.finishReason, 'tool_calls');
    assert.deepEqual(completion.toolCalls, [{ id: 'call_a', type: 'function', function: { name: 'python', arguments: '{"code": "print(6*7)"}' } }]);
    assert.equal(completion.logprobs, undefined);
    assert.equal(lastHeaders.authorization, undefined);
    const followUp = [
      ...messages,
      { role: 'assistant' as const, content: null, tool_calls: completion.toolCalls },
      { role: 'tool' as const, tool_call_id: 'call_a', content: '42\n' },
    ];
    handler = (_body, response) => sendJson(response, 200, {
      id: 'chatcmpl-3', model: 'qwen', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: 'It is 42.' } }],
    });
    assert.equal((await client.chat({ messages: followUp })).content, 'It is 42.');
    assert.deepEqual(lastBody.messages, followUp);
  });

  test('takes token ids from llama.cpp-style log-probs and object-valued arguments', async () => {
    handler = (_body, response) => sendJson(response, 200, {
      id: 'x', model: 'gguf',
      choices: [{
        index: 0, finish_reason: 'stop',
        message: { role: 'assistant', content: 'hi', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: { a: 1 } } }] },
        logprobs: { content: [{ id: 7, token: 'h', logprob: -0.1, top_logprobs: [{ id: 7, token: 'h', logprob: -0.1 }] }, { id: 8, token: 'i', logprob: -0.2 }] },
      }],
    });
    const completion = await new OpenAIChatClient({ baseUrl, model: 'gguf' }).chat({ messages, logprobs: true });
    assert.deepEqual(completion.tokenIds, [7, 8]);
    assert.deepEqual(completion.logprobs![0], { token: 'h', tokenId: 7, logprob: -0.1, topLogprobs: [{ token: 'h', tokenId: 7, logprob: -0.1 }] });
    assert.equal(completion.toolCalls[0]!.function.arguments, '{"a":1}');
    assert.equal(lastBody.logprobs, true);
    assert.equal('top_logprobs' in lastBody, false);
  });
});

describe('OpenAIChatClient, streaming', () => {
  test('assembles streamed text, log-probs, token ids and usage, and reports deltas', async () => {
    handler = (_body, response) => void sendEvents(response, [
      event(chunk({ role: 'assistant', content: '' }, {})).replace('"choices"', '"prompt_token_ids":[1,2],"choices"'),
      event(chunk({ content: 'Forty' }, { logprobs: { content: [{ token: 'token_id:5', logprob: -0.1, top_logprobs: [] }] }, token_ids: [5] })),
      // One event split across writes, with CRLF line ends and a keep-alive comment.
      ': keep-alive\r\n\r\ndata: {"id":"chatcmpl-7","model":"qwen","choices":[{"index":0,"delta":{"content":"-two"},',
      '"logprobs":{"content":[{"token":"token_id:6","logprob":-0.2,"top_logprobs":[]}]},"token_ids":[6],"finish_reason":null}]}\r\n\r\n',
      event(chunk({}, { finish_reason: 'stop' })),
      event({ id: 'chatcmpl-7', model: 'qwen', choices: [], usage: { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 } }),
      'data: [DONE]\n\n',
    ]);
    const deltas: ChatDelta[] = [];
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen' });
    const completion = await client.chat({ messages, stream: true, logprobs: true, returnTokenIds: true, onDelta: (delta) => deltas.push(delta) });
    assert.equal(lastBody.stream, true);
    assert.deepEqual(lastBody.stream_options, { include_usage: true });
    assert.deepEqual(deltas, [{ content: 'Forty' }, { content: '-two' }]);
    assert.deepEqual(completion, {
      id: 'chatcmpl-7', model: 'qwen', content: 'Forty-two', toolCalls: [], finishReason: 'stop',
      logprobs: [
        { token: 'token_id:5', tokenId: 5, logprob: -0.1, topLogprobs: [] },
        { token: 'token_id:6', tokenId: 6, logprob: -0.2, topLogprobs: [] },
      ],
      tokenIds: [5, 6],
      promptTokenIds: [1, 2],
      usage: { promptTokens: 2, completionTokens: 2, totalTokens: 4 },
    });
  });

  test('assembles streamed tool calls from their pieces', async () => {
    handler = (_body, response) => void sendEvents(response, [
      event(chunk({ role: 'assistant', reasoning_content: 'I will compute.' })),
      event(chunk({ tool_calls: [{ index: 0, id: 'call_x', type: 'function', function: { name: 'python', arguments: '' } }] })),
      event(chunk({ tool_calls: [{ index: 0, function: { arguments: '{"code": "pri' } }] })),
      event(chunk({ tool_calls: [{ index: 0, function: { arguments: 'nt(1)"}' } }] })),
      event(chunk({ tool_calls: [{ index: 1, id: 'call_y', type: 'function', function: { name: 'search', arguments: '{"q": "x"}' } }] })),
      event(chunk({}, { finish_reason: 'tool_calls' })),
      'data: [DONE]\n\n',
    ]);
    const deltas: ChatDelta[] = [];
    const completion = await new OpenAIChatClient({ baseUrl, model: 'qwen' }).chat({ messages, stream: true, onDelta: (delta) => deltas.push(delta) });
    assert.equal(completion.content, null);
    assert.equal(completion.reasoning, 'I will compute.');
    assert.equal(completion.finishReason, 'tool_calls');
    assert.deepEqual(completion.toolCalls, [
      { id: 'call_x', type: 'function', function: { name: 'python', arguments: '{"code": "print(1)"}' } },
      { id: 'call_y', type: 'function', function: { name: 'search', arguments: '{"q": "x"}' } },
    ]);
    assert.deepEqual(deltas[1], { toolCall: { index: 0, id: 'call_x', name: 'python' } });
    assert.deepEqual(deltas[2], { toolCall: { index: 0, arguments: '{"code": "pri' } });
  });

  test('a stream cut short or reporting an error is a clear error', async () => {
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen' });
    handler = (_body, response) => void sendEvents(response, [event(chunk({ content: 'Hal' }))]);
    await assert.rejects(client.chat({ messages, stream: true }), { name: 'PolicyRequestError', kind: 'protocol', message: /ended before the answer was finished/ });
    handler = (_body, response) => void sendEvents(response, [event(chunk({ content: 'Hal' })), event({ error: { message: 'out of KV cache', code: 500 } })]);
    await assert.rejects(client.chat({ messages, stream: true }), { kind: 'http', message: /mid-stream: out of KV cache/ });
    handler = (_body, response) => void sendEvents(response, ['data: {not json\n\n']);
    await assert.rejects(client.chat({ messages, stream: true }), { kind: 'protocol', message: /is not JSON/ });
  });
});

describe('OpenAIChatClient, failures', () => {
  test('an HTTP error carries the status and the server\'s message', async () => {
    handler = (_body, response) => sendJson(response, 400, {
      object: 'error', message: "This model's maximum context length is 4096 tokens", type: 'BadRequestError', code: 400,
    });
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen' });
    const error = await client.chat({ messages }).catch((caught: unknown) => caught);
    assert.ok(error instanceof PolicyRequestError);
    assert.equal(error.kind, 'http');
    assert.equal(error.status, 400);
    assert.match(error.message, /answered 400: This model's maximum context length is 4096 tokens/);
    handler = (_body, response) => sendJson(response, 503, { error: { message: 'overloaded', type: 'server_error' } });
    await assert.rejects(client.chat({ messages }), { kind: 'http', status: 503, message: /503: overloaded/ });
  });

  test('times out, aborts, and reports refused connections', async () => {
    const hanging: ServerResponse[] = [];
    handler = (_body, response) => { hanging.push(response); };
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen', timeoutMs: 150 });
    const started = performance.now();
    await assert.rejects(client.chat({ messages }), { kind: 'timeout', message: /within 150 ms/ });
    assert.ok(performance.now() - started < 2000);
    handler = (_body, response) => void sendEvents(response, [event(chunk({ content: 'slow' }))].concat(Array(200).fill(': ping\n\n')));
    await assert.rejects(client.chat({ messages, stream: true, timeoutMs: 100 }), { kind: 'timeout' });
    handler = (_body, response) => { hanging.push(response); };
    const controller = new AbortController();
    const pending = client.chat({ messages, signal: controller.signal, timeoutMs: 5000 });
    setTimeout(() => controller.abort(), 20);
    await assert.rejects(pending, { kind: 'aborted' });
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, '127.0.0.1', done));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((done) => closed.close(done));
    await assert.rejects(new OpenAIChatClient({ baseUrl: `http://127.0.0.1:${port}/v1`, model: 'm' }).chat({ messages }),
      { kind: 'network', message: /ECONNREFUSED/ });
    for (const response of hanging) response.destroy();
  });

  test('a body that is not the wire format is a protocol error', async () => {
    const client = new OpenAIChatClient({ baseUrl, model: 'qwen' });
    handler = (_body, response) => { response.writeHead(200, { 'content-type': 'application/json' }); response.end('<html>'); };
    await assert.rejects(client.chat({ messages }), { kind: 'protocol', message: /not JSON/ });
    handler = (_body, response) => sendJson(response, 200, { choices: [] });
    await assert.rejects(client.chat({ messages }), { kind: 'protocol', message: /without choices\[0\]\.message/ });
  });

  test('bad options and requests are refused with the argument named', async () => {
    assert.throws(() => new OpenAIChatClient({ baseUrl: 'not a url', model: 'm' }), { name: 'TypeError', message: /options\.baseUrl/ });
    assert.throws(() => new OpenAIChatClient({ baseUrl: 'ftp://127.0.0.1/', model: 'm' }), { name: 'TypeError', message: /options\.baseUrl/ });
    assert.throws(() => new OpenAIChatClient({ baseUrl, model: '' }), { name: 'TypeError', message: /options\.model/ });
    assert.throws(() => new OpenAIChatClient({ baseUrl, model: 'm', timeoutMs: 0 }), { name: 'RangeError', message: /options\.timeoutMs/ });
    const client = new OpenAIChatClient({ baseUrl, model: 'm' });
    await assert.rejects(client.chat({ messages: [] }), { name: 'TypeError', message: /request\.messages/ });
    await assert.rejects(client.chat({ messages: [{ role: 'robot', content: 'x' }] as never }), { name: 'TypeError', message: /request\.messages\[0\]\.role/ });
    await assert.rejects(client.chat({ messages, temperature: -1 }), { name: 'RangeError', message: /request\.temperature/ });
    await assert.rejects(client.chat({ messages, topLogprobs: 21 }), { name: 'RangeError', message: /request\.topLogprobs/ });
    await assert.rejects(client.chat({ messages, stop: 5 as never }), { name: 'TypeError', message: /request\.stop/ });
    await assert.rejects(client.chat({ messages, toolChoice: 'always' as never }), { name: 'TypeError', message: /request\.toolChoice/ });
  });
});
