import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import {
  BUILTIN_CORPUS, BUILTIN_QUESTIONS, Bm25Retriever, ChatCompletionPolicy, DEFAULT_DOCUMENT_BUDGET, DecomposerSolver, MultiTurnReasoner, decomposerPreferenceQuestion,
  decomposerReferenceEpisodes,
  ProposeJudgeUpdate, ScriptedPolicy, SelfCorrectingAgent, TIRGen, judgeVerifier, lastCodeBlock, majorityVerifier, parseSubquestions, referenceVerifier, selectMemory,
  resolveReferences, splitDocumentBudget, toolVerifier, type Generation, type RoundRecord, type StepAttempt, type Verifier,
} from '../lib/agents/index.js';
import { OpenAIChatClient, type ChatCompletion, type ChatPolicy, type ChatRequest } from '../lib/chat_client/index.js';
import { buildPreferencePairs } from '../lib/preferences/index.js';
import { qaReward } from '../lib/rewards/index.js';
import { PythonSandbox } from '../lib/tools/sandbox.js';
import { ToolRegistry, codeExecutionTool } from '../lib/tools/registry.js';
import type { Tool } from '../lib/tools/types.js';
import { readTrajectories, toChatMessages, type TrajectoryChatMessage as ChatMessage, type Trajectory } from '../lib/trajectory/index.js';

const py = (code: string): string => '```python\n' + code + '\n```';

/**
 * A stand-in for the Python sandbox, so control-flow tests are instant: `print(x)` prints x
 * literally, `raise Name` fails with a traceback-like error, `while True` times out.
 */
function fakePython(): Tool<{ code: string }> {
  return {
    name: 'python',
    description: 'Runs Python (fake)',
    parameters: { type: 'object', properties: { code: { type: 'string' } }, required: ['code'] },
    async call({ code }) {
      const raised = /raise (\w+)/.exec(code);
      if (raised !== null) return { status: 'error', error: `Traceback (most recent call last):\n${raised[1]}: raised` };
      if (code.includes('while True')) return { status: 'timeout', error: 'Timed out after 1000 ms' };
      const printed = [...code.matchAll(/print\((.*)\)/g)].map((match) => match[1]).join('\n');
      return { status: 'success', result: printed === '' ? '' : `${printed}\n` };
    },
  };
}

const addTool: Tool<{ a: number; b: number }> = {
  name: 'add',
  description: 'Adds two numbers',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
  async call({ a, b }) {
    return { status: 'success', result: String(a + b) };
  },
};

function registry(...tools: Tool<never>[]): ToolRegistry {
  const result = new ToolRegistry();
  for (const tool of tools) result.register(tool);
  return result;
}

function assistantTexts(messages: readonly ChatMessage[]): string[] {
  return messages.filter((message) => message.role === 'assistant').map((message) => message.content ?? '');
}

let sandbox: PythonSandbox | undefined;
let sandboxProblem = '';
before(async () => {
  try {
    const candidate = new PythonSandbox({ timeoutMs: 5000, concurrency: 1 });
    const probe = await candidate.run('print(1)');
    if (probe.status === 'success') sandbox = candidate;
    else {
      sandboxProblem = `the sandbox answered ${probe.status}: ${probe.error ?? ''}`;
      await candidate.close();
    }
  } catch (error) {
    sandboxProblem = `no sandbox here: ${(error as Error).message}`;
  }
});
after(async () => {
  await sandbox?.close();
});

describe('ScriptedPolicy', () => {
  test('answers in order, records copies of each conversation, and fails when the script runs out', async () => {
    const policy = new ScriptedPolicy(['one', { text: 'two', toolCall: { name: 'add', arguments: '{"a":1,"b":2}' } }]);
    const messages: ChatMessage[] = [{ role: 'user', content: 'hi' }];
    assert.deepEqual(await policy.generate(messages), { text: 'one' });
    messages.push({ role: 'assistant', content: 'one' });
    assert.deepEqual(await policy.generate(messages, { tools: [] }), { text: 'two', toolCall: { name: 'add', arguments: '{"a":1,"b":2}' } });
    messages[0]!.content = 'changed';
    assert.equal(policy.calls.length, 2);
    assert.equal(policy.calls[0]![0]!.content, 'hi');
    assert.equal(policy.calls[1]!.length, 2);
    assert.deepEqual(policy.callOptions, [undefined, { tools: [] }]);
    await assert.rejects(policy.generate(messages), /2 responses but was asked for response 3/);
  });

  test('a function script sees the conversation and the call number', async () => {
    const policy = new ScriptedPolicy((messages, call) => `${call}:${messages.length}`);
    assert.equal((await policy.generate([{ role: 'user', content: 'x' }])).text, '0:1');
    assert.equal((await policy.generate([])).text, '1:0');
  });

  test('bad scripts are TypeErrors naming the entry', async () => {
    assert.throws(() => new ScriptedPolicy(42 as never), (error: Error) => error instanceof TypeError && /script/.test(error.message));
    assert.throws(() => new ScriptedPolicy([{ text: 1 }] as never), (error: Error) => error instanceof TypeError && /script\[0\]\.text/.test(error.message));
    await assert.rejects(new ScriptedPolicy(() => 5 as never).generate([]), TypeError);
  });
});

describe('ChatCompletionPolicy', () => {
  class RecordingClient implements ChatPolicy {
    requests: ChatRequest[] = [];
    constructor(private readonly completion: ChatCompletion) {}
    async chat(request: ChatRequest): Promise<ChatCompletion> {
      this.requests.push(structuredClone({ ...request, onDelta: undefined, signal: undefined }));
      return this.completion;
    }
  }

  test('sends the wire format and reads one turn back', async () => {
    const client = new RecordingClient({
      id: 'c1', model: 'm', content: 'Let me add.', reasoning: 'think first',
      toolCalls: [
        { id: 'call_a', type: 'function', function: { name: 'add', arguments: '{"a":1,"b":2}' } },
        { id: 'call_b', type: 'function', function: { name: 'add', arguments: '{"a":3,"b":4}' } },
      ],
      finishReason: 'tool_calls', tokenIds: [5, 6, 7],
      logprobs: [5, 6, 7].map((id) => ({ token: `token_id:${id}`, tokenId: id, logprob: -0.5, topLogprobs: [] })),
    });
    const policy = new ChatCompletionPolicy(client, { temperature: 0.7, maxTokens: 64 });
    const tools = registry(addTool as Tool<never>).toOpenAITools();
    const generation = await policy.generate([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'call', tool_calls: [{ id: 'c0', type: 'function', function: { name: 'add', arguments: '{}' } }] },
      { role: 'tool', content: '3', name: 'add', status: 'success' },
      { role: 'assistant', content: py('print(1)') },
      { role: 'tool', content: '1', name: 'python', status: 'success' },
    ], { tools });
    assert.deepEqual(generation, {
      text: '<think>think first</think>Let me add.',
      toolCall: { id: 'call_a', name: 'add', arguments: '{"a":1,"b":2}' },
      tokenIds: [5, 6, 7], logprobs: [-0.5, -0.5, -0.5], finishReason: 'tool_calls',
    });
    const [request] = client.requests;
    assert.equal(request!.temperature, 0.7);
    assert.equal(request!.maxTokens, 64);
    assert.deepEqual(request!.tools, tools);
    assert.deepEqual(request!.extraBody, { parallel_tool_calls: false });
    assert.deepEqual(request!.messages, [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'call', tool_calls: [{ id: 'c0', type: 'function', function: { name: 'add', arguments: '{}' } }] },
      { role: 'tool', content: '3', tool_call_id: 'c0', name: 'add' },
      { role: 'assistant', content: py('print(1)') },
      // Output of inline code answers no tool call: servers only accept it as a user message.
      { role: 'user', content: '1' },
    ]);
  });

  test('without tools no tools are sent; log-probs that do not line up with ids are left out', async () => {
    const client = new RecordingClient({
      id: 'c', model: 'm', content: null, toolCalls: [], finishReason: 'length', tokenIds: [1, 2],
      logprobs: [{ token: 'a', logprob: -1, topLogprobs: [] }],
    });
    const generation = await new ChatCompletionPolicy(client).generate([{ role: 'user', content: 'q' }]);
    assert.deepEqual(generation, { text: '', tokenIds: [1, 2], finishReason: 'length' });
    assert.equal(client.requests[0]!.tools, undefined);
    assert.equal(client.requests[0]!.extraBody, undefined);
  });

  test('works with the real client against a loopback server', async () => {
    const server = createServer((request, response) => {
      let body = '';
      request.on('data', (chunk) => (body += chunk));
      request.on('end', () => {
        const parsed = JSON.parse(body) as { messages: unknown[] };
        response.setHeader('content-type', 'application/json');
        response.end(JSON.stringify({
          id: 'x', model: 'mock',
          choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: `saw ${parsed.messages.length} messages \\boxed{4}` } }],
        }));
      });
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const { port } = server.address() as { port: number };
      const policy = new ChatCompletionPolicy(new OpenAIChatClient({ baseUrl: `http://127.0.0.1:${port}/v1`, model: 'mock' }));
      const trajectory = await new MultiTurnReasoner({ policy }).run({ prompt: '2+2?', gold: '4' });
      assert.equal(trajectory.turns[0]!.action.text, 'saw 2 messages \\boxed{4}');
      assert.equal(trajectory.reward, 1);
    } finally {
      server.close();
    }
  });

  test('bad arguments', () => {
    assert.throws(() => new ChatCompletionPolicy({} as never), (error: Error) => error instanceof TypeError && /client/.test(error.message));
    assert.throws(() => new ChatCompletionPolicy({ chat: async () => ({}) } as never, { messages: [] } as never), RangeError);
  });
});

describe('lastCodeBlock', () => {
  test('finds the last complete block of the language', () => {
    assert.equal(lastCodeBlock(`a ${py('x = 1')} b ${py('print(2)')}`), 'print(2)\n');
    assert.equal(lastCodeBlock(`${py('x = 1')}\n\`\`\`python\nunclosed`), 'x = 1\n');
    assert.equal(lastCodeBlock('```pythonic\nno\n```'), null);
    assert.equal(lastCodeBlock('```js\nno\n```'), null);
    assert.equal(lastCodeBlock('```JavaScript\nlet a\n```', 'javascript'), 'let a\n');
    assert.equal(lastCodeBlock('no code'), null);
  });
});

describe('MultiTurnReasoner', () => {
  test('reason, tool call, inline code and answer turns, each action apart from its response', async () => {
    const policy = new ScriptedPolicy([
      'First I think about it.',
      { text: 'Add them.', toolCall: { id: 'c1', name: 'add', arguments: '{"a":40,"b":2}' } },
      `Check: ${py('print(42)')}`,
      'So the answer is \\boxed{42}.',
    ]);
    const reasoner = new MultiTurnReasoner({ policy, tools: registry(fakePython() as Tool<never>, addTool as Tool<never>), system: 'S' });
    const trajectory = await reasoner.run({ prompt: 'What is 40 + 2?', id: 'e1', groupId: 'g', gold: '42', metadata: { source: 't' } });
    assert.equal(trajectory.id, 'e1');
    assert.equal(trajectory.groupId, 'g');
    assert.equal(trajectory.turns.length, 4);
    assert.equal(trajectory.turns[0]!.response, undefined);
    assert.deepEqual(trajectory.turns[1]!.response, { toolName: 'add', status: 'success', text: '42', toolCallId: 'c1' });
    assert.deepEqual(trajectory.turns[2]!.response, { toolName: 'python', status: 'success', text: '42\n' });
    assert.equal(trajectory.turns[3]!.response, undefined);
    assert.equal(trajectory.reward, 1);
    assert.equal(trajectory.truncated, undefined);
    assert.deepEqual(trajectory.metadata, { agent: 'multi-turn-reasoner', task: { source: 't' }, answer: '42' });
    // The model saw exactly the trajectory so far, with the tools offered.
    policy.calls.forEach((messages, k) => {
      assert.deepEqual(messages, toChatMessages({ ...trajectory, turns: trajectory.turns.slice(0, k) }));
    });
    assert.deepEqual(policy.callOptions[0]!.tools!.map((tool) => tool.function.name), ['python', 'add']);
  });

  test('SimpleTIR: endAtVoidTurn ends the episode at a turn with neither code nor an answer', async () => {
    const script = [py('print(1)'), 'Let me think more.', '\\boxed{1}'];
    const ending = await new MultiTurnReasoner({ policy: new ScriptedPolicy(script), tools: registry(fakePython() as Tool<never>), endAtVoidTurn: true }).run({ prompt: 'p', gold: '1' });
    assert.equal(ending.turns.length, 2);
    assert.equal(ending.metadata!.voidTurn, 1);
    assert.equal(ending.truncated, undefined);
    assert.equal(ending.reward, 0);
    // Without it the void turn is reasoning the model goes on from.
    const going = await new MultiTurnReasoner({ policy: new ScriptedPolicy(script), tools: registry(fakePython() as Tool<never>) }).run({ prompt: 'p', gold: '1' });
    assert.equal(going.turns.length, 3);
    assert.equal(going.reward, 1);
  });

  test('THOR/ToRA: while inline code runs, each generation stops at the output fence (or the markup\'s closing delimiter)', async () => {
    const fenced = new ScriptedPolicy([py('print(2)'), '\\boxed{2}']);
    await new MultiTurnReasoner({ policy: fenced, tools: registry(fakePython() as Tool<never>) }).run({ prompt: 'p' });
    assert.deepEqual(fenced.callOptions.map((options) => options?.stop), [['```output'], ['```output']]);
    const marked = new ScriptedPolicy(['<calc> 1+1 </calc>', '<ans> 2 </ans>']);
    const session = { cells: [] as string[], async run(code: string) { this.cells.push(code); return { tool: 'calc', status: 'success' as const, result: '2' }; } };
    const trajectory = await new MultiTurnReasoner({ policy: marked, codeMarkup: { open: '<calc>', close: '</calc>' }, codeSession: () => session, answer: (text) => /<ans>(.*)<\/ans>/.exec(text)?.[1]?.trim() ?? null }).run({ prompt: 'p', gold: '2' });
    assert.deepEqual(marked.callOptions[0]!.stop, ['</calc>']);
    assert.deepEqual(session.cells, ['1+1']);
    assert.equal(trajectory.reward, 1);
    // Without inline code nothing is stopped; `stop: []` turns it off.
    const plain = new ScriptedPolicy(['\\boxed{2}']);
    await new MultiTurnReasoner({ policy: plain }).run({ prompt: 'p' });
    assert.equal(plain.callOptions[0]!.stop, undefined);
    const off = new ScriptedPolicy(['\\boxed{2}']);
    await new MultiTurnReasoner({ policy: off, tools: registry(fakePython() as Tool<never>), stop: [] }).run({ prompt: 'p' });
    assert.equal(off.callOptions[0]!.stop, undefined);
    assert.throws(() => new MultiTurnReasoner({ policy: plain, stop: [''] }), /options\.stop\[0\]/);
    assert.throws(() => new MultiTurnReasoner({ policy: plain, codeMarkup: { open: '<c>' } as never }), /options\.codeMarkup\.close/);
  });

  test('stops at maxTurns without an answer, truncated, reward 0', async () => {
    const policy = new ScriptedPolicy(() => py('raise ValueError'));
    const trajectory = await new MultiTurnReasoner({ policy, tools: registry(fakePython() as Tool<never>), maxTurns: 3 }).run({ prompt: 'p', gold: '1' });
    assert.equal(policy.calls.length, 3);
    assert.equal(trajectory.turns.length, 3);
    assert.ok(trajectory.turns.every((turn) => turn.response?.status === 'error' && /ValueError: raised/.test(turn.response.text)));
    assert.equal(trajectory.truncated, true);
    assert.equal(trajectory.reward, 0);
    assert.equal(trajectory.metadata!.answer, null);
  });

  test('a turn cut off by the length limit ends the episode; no gold means no reward', async () => {
    const policy = new ScriptedPolicy([{ text: `${py('print(1)')} \\boxed{1}`, finishReason: 'length' }, 'never']);
    const trajectory = await new MultiTurnReasoner({ policy, tools: registry(fakePython() as Tool<never>) }).run({ prompt: 'p' });
    assert.equal(trajectory.turns.length, 1);
    assert.equal(trajectory.turns[0]!.response, undefined);
    assert.equal(trajectory.truncated, true);
    assert.equal('reward' in trajectory, false);
    assert.equal(policy.calls.length, 1);
  });

  test('without a python tool, inline code is not run; a custom reward is used', async () => {
    const policy = new ScriptedPolicy([`${py('print(1)')}`, 'The answer is 7.']);
    const trajectory = await new MultiTurnReasoner({ policy, reward: (answer) => (answer === '7' ? 0.5 : -1) }).run({ prompt: 'p', gold: 'x' });
    assert.equal(trajectory.turns.length, 2);
    assert.equal(trajectory.turns[0]!.response, undefined);
    assert.equal(trajectory.reward, 0.5);
  });

  test('with reasoningTurns false, a reply without a tool call is the answer', async () => {
    const policy = new ScriptedPolicy([{ text: '', toolCall: { name: 'add', arguments: '{"a":1,"b":1}' } }, '  2\n']);
    const reasoner = new MultiTurnReasoner({ policy, tools: registry(addTool as Tool<never>), reasoningTurns: false });
    const trajectory = await reasoner.run({ prompt: '1+1?', gold: '2' });
    assert.equal(trajectory.turns.length, 2);
    assert.equal(trajectory.metadata!.answer, '2');
    assert.equal(trajectory.reward, 1);
  });

  test('bad options and tasks name the argument', async () => {
    const policy = new ScriptedPolicy([]);
    const cases: Array<[unknown, ErrorConstructor, RegExp]> = [
      [undefined, TypeError, /options/],
      [{}, TypeError, /options\.policy/],
      [{ policy, maxTurns: 0 }, RangeError, /options\.maxTurns/],
      [{ policy, maxTurns: 1.5 }, TypeError, /options\.maxTurns/],
      [{ policy, tools: {} }, TypeError, /options\.tools/],
      [{ policy, codeTool: 'python' }, RangeError, /options\.codeTool/],
      [{ policy, codeFence: 'py thon' }, RangeError, /options\.codeFence/],
      [{ policy, system: 3 }, TypeError, /options\.system/],
      [{ policy, reward: 'x' }, TypeError, /options\.reward/],
      [{ policy, reasoningTurns: 1 }, TypeError, /options\.reasoningTurns/],
    ];
    for (const [options, kind, name] of cases) {
      assert.throws(() => new MultiTurnReasoner(options as never), (error: Error) => error instanceof kind && name.test(error.message), String(name));
    }
    const reasoner = new MultiTurnReasoner({ policy });
    await assert.rejects(reasoner.run({} as never), /task\.prompt/);
    await assert.rejects(reasoner.run({ prompt: 'p', gold: [1] } as never), /task\.gold/);
    await assert.rejects(reasoner.run({ prompt: 'p', id: 1 } as never), /task\.id/);
  });
});

describe('SelfCorrectingAgent', () => {
  const tools = () => registry(fakePython() as Tool<never>);

  test('backtracks a failed step up to the depth, sampling it again from the same context', async () => {
    const policy = new ScriptedPolicy([
      `Step A1 ${py('raise NameError')}`,
      `Step A2 ${py('raise TypeError')}`,
      `Step A3 ${py('print(6)')}`,
      'Done: \\boxed{6}',
    ]);
    const agent = new SelfCorrectingAgent({ policy, tools: tools(), maxBacktracks: 2 });
    const trajectory = await agent.run({ prompt: 'p', gold: '6' });
    assert.deepEqual(trajectory.turns.map((turn) => turn.action.text.slice(0, 7)), ['Step A3', 'Done: \\']);
    assert.deepEqual(trajectory.turns[0]!.response, { toolName: 'python', status: 'success', text: '6\n' });
    const attempts = trajectory.metadata!.attempts as StepAttempt[];
    assert.deepEqual(attempts.map((a) => [a.step, a.attempt, a.backtracked]), [[0, 0, true], [0, 1, true], [0, 2, false], [1, 0, false]]);
    assert.equal(attempts[0]!.response!.status, 'error');
    assert.ok(attempts.every((a) => a.correction === undefined));
    assert.equal(trajectory.metadata!.backtracks, 2);
    assert.equal(trajectory.reward, 1);
    // Every attempt at step 0 was sampled from the context the trajectory holds before it (THOR's
    // backtracking): the same messages, no failed step or error in them.
    const prefix = toChatMessages({ ...trajectory, turns: [] });
    for (const call of [0, 1, 2]) assert.deepEqual(policy.calls[call], prefix);
    // The next step sees the kept path only.
    assert.deepEqual(policy.calls[3], toChatMessages({ ...trajectory, turns: trajectory.turns.slice(0, 1) }));
  });

  test("retry 'correct': the trajectory holds the failed step, its error and the correction the retry was sampled from", async () => {
    const policy = new ScriptedPolicy([`Step A1 ${py('raise NameError')}`, `Step A2 ${py('print(6)')}`, 'Done: \\boxed{6}']);
    const agent = new SelfCorrectingAgent({ policy, tools: tools(), retry: 'correct' });
    const trajectory = await agent.run({ prompt: 'p', gold: '6' });
    assert.deepEqual(trajectory.turns.map((turn) => turn.action.text.slice(0, 7)), ['Step A1', 'Step A2', 'Done: \\']);
    assert.match(trajectory.turns[0]!.response!.text, /NameError: raised[\s\S]*Write that step again/);
    const attempts = trajectory.metadata!.attempts as StepAttempt[];
    assert.deepEqual(attempts.map((a) => [a.step, a.attempt, a.backtracked]), [[0, 0, true], [1, 1, false], [2, 0, false]]);
    assert.match(attempts[0]!.correction!, /NameError: raised/);
    // Each call saw exactly the trajectory before its turn: nothing outside the record.
    for (const call of [0, 1, 2]) assert.deepEqual(policy.calls[call], toChatMessages({ ...trajectory, turns: trajectory.turns.slice(0, call) }));
  });

  test('when the depth is spent the failed step stays and the episode goes on', async () => {
    const policy = new ScriptedPolicy([py('raise E1'), py('raise E2'), `${py('while True: pass')}`, py('raise E3'), '\\boxed{1}']);
    const agent = new SelfCorrectingAgent({ policy, tools: tools(), maxBacktracks: 1 });
    const trajectory = await agent.run({ prompt: 'p' });
    assert.deepEqual(trajectory.turns.map((turn) => turn.response?.status), ['error', 'error', undefined]);
    assert.match(trajectory.turns[0]!.response!.text, /E2/);
    assert.match(trajectory.turns[1]!.response!.text, /E3/);
    const attempts = trajectory.metadata!.attempts as StepAttempt[];
    assert.deepEqual(attempts.map((a) => [a.step, a.attempt, a.backtracked, a.response?.status]),
      [[0, 0, true, 'error'], [0, 1, false, 'error'], [1, 0, true, 'timeout'], [1, 1, false, 'error'], [2, 0, false, undefined]]);
    assert.equal(trajectory.metadata!.answer, '1');
    assert.equal(trajectory.truncated, undefined);
  });

  test('endAtVoidTurn ends the episode at a step that neither runs code nor answers', async () => {
    const policy = new ScriptedPolicy([py('print(1)'), 'Hmm.', '\\boxed{1}']);
    const trajectory = await new SelfCorrectingAgent({ policy, tools: tools(), endAtVoidTurn: true }).run({ prompt: 'p', gold: '1' });
    assert.equal(trajectory.turns.length, 2);
    assert.equal(trajectory.metadata!.voidTurn, 1);
    assert.equal(trajectory.truncated, undefined);
    assert.deepEqual(policy.callOptions.map((options) => options?.stop), [['```output'], ['```output']]);
  });

  test('depth 0 never backtracks; maxTurns bounds the kept steps', async () => {
    const policy = new ScriptedPolicy(() => py('raise E'));
    const trajectory = await new SelfCorrectingAgent({ policy, tools: tools(), maxBacktracks: 0, maxTurns: 2 }).run({ prompt: 'p', gold: '1' });
    assert.equal(policy.calls.length, 2);
    assert.equal(trajectory.metadata!.backtracks, 0);
    assert.equal(trajectory.truncated, true);
    assert.equal(trajectory.reward, 0);
  });

  test('bad options', () => {
    const policy = new ScriptedPolicy([]);
    assert.throws(() => new SelfCorrectingAgent({ policy, maxBacktracks: -1 }), (error: Error) => error instanceof RangeError && /options\.maxBacktracks/.test(error.message));
    assert.throws(() => new SelfCorrectingAgent({ policy, correctionPrompt: 1 as never }), (error: Error) => error instanceof TypeError && /options\.correctionPrompt/.test(error.message));
    assert.throws(() => new SelfCorrectingAgent({ policy, retry: 'again' as never }), (error: Error) => error instanceof TypeError && /options\.retry/.test(error.message));
    assert.throws(() => new SelfCorrectingAgent({ policy, endAtVoidTurn: 1 as never }), (error: Error) => error instanceof TypeError && /options\.endAtVoidTurn/.test(error.message));
  });

  test('corrects a real sandbox error', async (t) => {
    if (sandbox === undefined) return t.skip(sandboxProblem);
    const policy = new ScriptedPolicy([py('print(10 / 0)'), py('print(10 // 2 + 37)'), 'So \\boxed{42}']);
    const agent = new SelfCorrectingAgent({ policy, tools: new ToolRegistry().register(codeExecutionTool(sandbox)) });
    const trajectory = await agent.run({ prompt: 'p', gold: '42' });
    const attempts = trajectory.metadata!.attempts as StepAttempt[];
    assert.match(attempts[0]!.response!.text, /ZeroDivisionError/);
    assert.deepEqual(trajectory.turns[0]!.response, { toolName: 'python', status: 'success', text: '42\n' });
    assert.equal(trajectory.reward, 1);
  });
});

describe('ProposeJudgeUpdate', () => {
  /** A verifier scoring by a table of answers, recording what it saw. */
  function tableVerifier(scores: Record<string, number>): Verifier & { seen: string[] } {
    const seen: string[] = [];
    return {
      name: 'table', seen,
      async verify(candidate) {
        seen.push(candidate.text);
        const score = scores[candidate.answer ?? ''] ?? 0;
        return { score, passed: score === 1, status: 'success', critique: `critique of ${candidate.answer}` };
      },
    };
  }

  test('round limit, memory of earlier attempts, best kept (earliest on ties)', async () => {
    const policy = new ScriptedPolicy(['\\boxed{1}', '\\boxed{2}', '\\boxed{3}', '\\boxed{4}']);
    const verifier = tableVerifier({ 1: 0.2, 2: 0.6, 3: 0.6, 4: 0.1 });
    const agent = new ProposeJudgeUpdate({ policy, verifier, maxRounds: 4, memorySize: 2, memory: 'recent' });
    const trajectory = await agent.run({ prompt: 'Find x.', gold: '2' });
    assert.equal(policy.calls.length, 4);
    assert.equal(trajectory.turns.length, 4);
    assert.deepEqual(trajectory.turns[1]!.response, { toolName: 'table', status: 'success', text: 'critique of 2' });
    assert.equal(trajectory.metadata!.best, 1);
    assert.equal(trajectory.metadata!.answer, '2');
    assert.equal(trajectory.reward, 1);
    // Each call is a fresh two-message conversation: the system prompt and one user message.
    assert.ok(policy.calls.every((messages) => messages.length === 2 && messages[1]!.role === 'user'));
    assert.equal(policy.calls[0]![1]!.content, 'Find x.');
    const round1 = policy.calls[1]![1]!.content!;
    assert.doesNotMatch(round1, /Earlier attempts/);
    assert.match(round1, /latest attempt \(attempt 1, score 0\.20\):\n\\boxed\{1\}[\s\S]*critique of 1/);
    const round3 = policy.calls[3]![1]!.content!;
    // memorySize 2: attempts 1 and 2 remembered, 3 is the latest.
    assert.match(round3, /Attempt 1: answer 1, score 0\.20\. Critique: critique of 1\n- Attempt 2: answer 2, score 0\.60/);
    assert.match(round3, /attempt 3, score 0\.60\):\n\\boxed\{3\}/);
    const rounds = trajectory.metadata!.rounds as Array<{ prompt: string; score: number }>;
    assert.deepEqual(rounds.map((round) => round.score), [0.2, 0.6, 0.6, 0.1]);
    assert.equal(rounds[3]!.prompt, round3);
  });

  test("memory 'recent' keeps only the most recent rounds", async () => {
    const policy = new ScriptedPolicy(['\\boxed{1}', '\\boxed{2}', '\\boxed{3}', '\\boxed{4}']);
    await new ProposeJudgeUpdate({ policy, verifier: tableVerifier({}), maxRounds: 4, memorySize: 1, memory: 'recent' }).run({ prompt: 'p' });
    const last = policy.calls[3]![1]!.content!;
    assert.doesNotMatch(last, /Attempt 1:/);
    assert.match(last, /Attempt 2: answer 2/);
    const none = new ScriptedPolicy(['\\boxed{1}', '\\boxed{2}', '\\boxed{3}']);
    await new ProposeJudgeUpdate({ policy: none, verifier: tableVerifier({}), memorySize: 0 }).run({ prompt: 'p' });
    assert.doesNotMatch(none.calls[2]![1]!.content!, /Earlier attempts/);
  });

  test('stops at the first passing candidate unless told not to', async () => {
    const scores = { 7: 1 };
    const policy = new ScriptedPolicy(['\\boxed{5}', '\\boxed{7}', '\\boxed{9}']);
    const trajectory = await new ProposeJudgeUpdate({ policy, verifier: tableVerifier(scores) }).run({ prompt: 'p' });
    assert.equal(policy.calls.length, 2);
    assert.equal(trajectory.metadata!.answer, '7');
    const all = new ScriptedPolicy(['\\boxed{7}', '\\boxed{5}', '\\boxed{9}']);
    const full = await new ProposeJudgeUpdate({ policy: all, verifier: tableVerifier(scores), stopWhenPassed: false }).run({ prompt: 'p' });
    assert.equal(all.calls.length, 3);
    assert.equal(full.metadata!.best, 0);
  });

  // AlphaApollo (tmlr-group/AlphaApollo commit 712a04dc, evolving_main.py `run_problem`): each
  // evolving round runs the tool-using policy environment for up to max_steps turns, and its
  // prompt holds the remembered solutions with their verifier feedback.
  test('each round runs the multi-turn tool-using reasoner; its episode is rewarded by its verified score', async () => {
    const policy = new ScriptedPolicy([
      `Let me compute. ${py('print(6 * 7)')}`, 'The code printed 42, so \\boxed{42}',
      `Check again. ${py('raise ValueError')}`, 'Still \\boxed{41}',
    ]);
    const verifier = tableVerifier({ 42: 0.3, 41: 0.9 });
    const agent = new ProposeJudgeUpdate({ policy, verifier, tools: registry(fakePython() as Tool<never>), maxRounds: 2 });
    const { trajectory, episodes } = await agent.runRounds({ prompt: 'What is 6 times 7?', id: 'task', groupId: 'g' });
    assert.equal(policy.calls.length, 4);
    // Round 0: a code turn (run by the tool, its output read next turn), then the answer.
    assert.deepEqual(episodes.map((episode) => episode.turns.length), [2, 2]);
    assert.deepEqual(episodes[0]!.turns[0]!.response, { toolName: 'python', status: 'success', text: '6 * 7\n' });
    assert.equal(episodes[1]!.turns[0]!.response!.status, 'error');
    assert.equal(policy.calls[1]!.at(-1)!.content, '6 * 7\n');
    // The tools are offered to the model in every call of every round.
    assert.ok(policy.callOptions.every((options) => options?.tools?.[0]?.function.name === 'python'));
    // Round 1's prompt remembers round 0: its proposal (both turns) and its critique.
    const rounds = trajectory.metadata!.rounds as RoundRecord[];
    assert.equal(policy.calls[2]![1]!.content, rounds[1]!.prompt);
    assert.match(policy.calls[2]![1]!.content!, /latest attempt \(attempt 1, score 0\.30\):\nLet me compute[\s\S]*so \\boxed\{42\}[\s\S]*critique of 42/);
    assert.deepEqual(verifier.seen[0], `Let me compute. ${py('print(6 * 7)')}\n\nThe code printed 42, so \\boxed{42}`);
    // Each round's episode is a trainable sequence: its own prompt, the task's group, the verified score as reward.
    assert.deepEqual(episodes.map((episode, k) => [episode.id, episode.groupId, episode.reward, episode.prompt === rounds[k]!.prompt, rounds[k]!.episodeId]),
      [['task/round0', 'g', 0.3, true, 'task/round0'], ['task/round1', 'g', 0.9, true, 'task/round1']]);
    assert.deepEqual(episodes[1]!.metadata!.verdict, { score: 0.9, passed: false, status: 'success', critique: 'critique of 41' });
    // No gold: the loop's reward is the best verified score.
    assert.deepEqual([trajectory.metadata!.best, trajectory.metadata!.bestScore, trajectory.reward, trajectory.metadata!.answer], [1, 0.9, 0.9, '41']);
    assert.deepEqual(trajectory.turns.map((turn) => turn.response!.text), ['critique of 42', 'critique of 41']);
    // With a gold answer the kept answer is scored against it.
    const graded = new ScriptedPolicy(['\\boxed{42}', '\\boxed{41}']);
    const withGold = await new ProposeJudgeUpdate({ policy: graded, verifier, maxRounds: 2 }).run({ prompt: 'p', gold: '42' });
    assert.deepEqual([withGold.metadata!.bestScore, withGold.reward], [0.9, 0]);
  });

  test("memory 'ranked' (the default) keeps AlphaApollo's best rounds: score, then brevity, by rank sum", () => {
    const record = (round: number, score: number, length: number) =>
      ({ round, prompt: '', answer: null, score, passed: false, critique: '', length, episodeId: `${round}` });
    const earlier = [record(0, 0.2, 10), record(1, 0.9, 50), record(2, 0.9, 20), record(3, 0.5, 5)];
    // Score ranks 2, 0, 0, 1; length ranks 1, 3, 2, 0; sums 3, 3, 2, 1.
    assert.deepEqual(selectMemory(earlier, 3, 'ranked').map((r) => r.round), [3, 2, 0]);
    assert.deepEqual(selectMemory(earlier, 2, 'recent').map((r) => r.round), [2, 3]);
    assert.deepEqual(selectMemory(earlier, 0, 'ranked'), []);
  });

  test('the default memory is ranked', async () => {
    const policy = new ScriptedPolicy(['\\boxed{1}', '\\boxed{2}', '\\boxed{3}', '\\boxed{4}']);
    await new ProposeJudgeUpdate({ policy, verifier: tableVerifier({ 1: 0.8, 2: 0.1, 3: 0.2 }), maxRounds: 4, memorySize: 1 }).run({ prompt: 'p' });
    // Before round 3: rounds 0 and 1 are earlier than the latest (2); round 0 scored best.
    assert.match(policy.calls[3]![1]!.content!, /Earlier attempts:\n- Attempt 1: answer 1, score 0\.80/);
    assert.doesNotMatch(policy.calls[3]![1]!.content!, /Attempt 2:/);
  });

  test('reference verifier scores the answer against the gold, reading the round episode', async () => {
    const verifier = referenceVerifier();
    assert.deepEqual(await verifier.verify({ text: '\\boxed{4}', answer: '4', round: 0 }, { prompt: 'p', gold: '4' }),
      { score: 1, passed: true, status: 'success', critique: 'The answer 4 is correct.' });
    assert.equal((await verifier.verify({ text: 'x', answer: null, round: 0 }, { prompt: 'p', gold: '4' })).critique, 'The solution gives no final answer.');
    assert.equal((await verifier.verify({ text: '\\boxed{4}', answer: '4', round: 0 }, { prompt: 'p' })).score, 0);
    const seen: Trajectory[] = [];
    const reading = referenceVerifier({ reward: (_answer, _task, episode) => (seen.push(episode), 0.5), passThreshold: 0.5, name: 'ref' });
    const policy = new ScriptedPolicy([`${py('print(2)')}`, '\\boxed{2}']);
    const { episodes } = await new ProposeJudgeUpdate({ policy, verifier: reading, tools: registry(fakePython() as Tool<never>), maxRounds: 1 })
      .runRounds({ prompt: 'p', gold: '2' });
    assert.equal(seen[0], episodes[0]);
    assert.deepEqual(episodes[0]!.metadata!.verdict, { score: 0.5, passed: true, status: 'success', critique: 'The answer 2 is correct.' });
    assert.throws(() => referenceVerifier({ passThreshold: Number.NaN }), (error: Error) => error instanceof RangeError && /options\.passThreshold/.test(error.message));
  });

  test('majority verifier: the majority of sampled judgements decides, ties go to the first', async () => {
    const judge = new ScriptedPolicy(['Wrong. \\boxed{2}', 'Fine. \\boxed{9}', 'Right. \\boxed{8}', 'No. \\boxed{1}', 'Yes. \\boxed{10}']);
    const voted = majorityVerifier(judgeVerifier({ policy: judge }));
    const candidate = { text: 'x = 2', answer: '2', round: 0 };
    assert.equal(voted.name, 'judge');
    const verdict = await voted.verify(candidate, { prompt: 'Solve x' });
    assert.equal(judge.calls.length, 3);
    assert.deepEqual([verdict.passed, verdict.critique, verdict.status], [true, 'Fine. \\boxed{9}', 'success']);
    assert.ok(Math.abs(verdict.score - 0.85) < 1e-12);
    const tie = await majorityVerifier(judgeVerifier({ policy: judge }), { samples: 2, name: 'votes' }).verify(candidate, { prompt: 'Solve x' });
    assert.deepEqual([tie.passed, tie.score, tie.critique], [false, 0.1, 'No. \\boxed{1}']);
    assert.throws(() => majorityVerifier({} as never), (error: Error) => error instanceof TypeError && /verifier/.test(error.message));
    assert.throws(() => majorityVerifier(voted, { samples: 0 }), (error: Error) => error instanceof RangeError && /options\.samples/.test(error.message));
  });

  test('tool verifier runs the candidate check', async () => {
    const verifier = toolVerifier({ tools: registry(fakePython() as Tool<never>) });
    const passed = await verifier.verify({ text: `${py('print(1)')} \\boxed{1}`, answer: '1', round: 0 }, { prompt: 'p' });
    assert.deepEqual(passed, { score: 1, passed: true, status: 'success', critique: 'The check ran without error. It printed:\n1\n' });
    const failed = await verifier.verify({ text: py('raise AssertionError'), answer: null, round: 0 }, { prompt: 'p' });
    assert.equal(failed.passed, false);
    assert.match(failed.critique, /^The check failed:\n[\s\S]*AssertionError: raised/);
    const missing = await verifier.verify({ text: 'no code', answer: null, round: 0 }, { prompt: 'p' });
    assert.deepEqual([missing.score, missing.status], [0, 'error']);
    assert.throws(() => toolVerifier({ tools: new ToolRegistry() }), (error: Error) => error instanceof RangeError && /options\.codeTool/.test(error.message));
  });

  test('judge verifier reads the boxed score out of 10', async () => {
    const judge = new ScriptedPolicy(['Looks right. \\boxed{9}', 'Wrong sign. \\boxed{3}', 'No verdict.', '\\boxed{11}']);
    const verifier = judgeVerifier({ policy: judge });
    const candidate = { text: 'x = 2', answer: '2', round: 0 };
    const verdicts = [];
    for (let i = 0; i < 4; i++) verdicts.push(await verifier.verify(candidate, { prompt: 'Solve x' }));
    assert.deepEqual(verdicts.map((v) => [v.score, v.passed]), [[0.9, true], [0.3, false], [0, false], [0, false]]);
    assert.equal(verdicts[1]!.critique, 'Wrong sign. \\boxed{3}');
    assert.match(judge.calls[0]![1]!.content!, /Problem:\nSolve x\n\nProposed solution:\nx = 2/);
    assert.throws(() => judgeVerifier({ policy: judge, passThreshold: 2 }), RangeError);
  });

  test('bad options and verdicts', async () => {
    const policy = new ScriptedPolicy(['\\boxed{a}']);
    assert.throws(() => new ProposeJudgeUpdate({ policy } as never), (error: Error) => error instanceof TypeError && /options\.verifier/.test(error.message));
    assert.throws(() => new ProposeJudgeUpdate({ policy, verifier: tableVerifier({}), maxRounds: 0 }), RangeError);
    assert.throws(() => new ProposeJudgeUpdate({ policy, verifier: tableVerifier({}), stopWhenPassed: 1 as never }), TypeError);
    assert.throws(() => new ProposeJudgeUpdate({ policy, verifier: tableVerifier({}), memory: 'best' as never }), (error: Error) => error instanceof RangeError && /options\.memory/.test(error.message));
    assert.throws(() => new ProposeJudgeUpdate({ policy, verifier: tableVerifier({}), maxTurnsPerRound: 0 }), (error: Error) => error instanceof RangeError && /options\.maxTurnsPerRound/.test(error.message));
    const broken: Verifier = { name: 'v', verify: async () => ({ score: Number.NaN, passed: false, status: 'success', critique: '' }) };
    await assert.rejects(new ProposeJudgeUpdate({ policy, verifier: broken }).run({ prompt: 'p' }), /verdict\.score/);
  });
});

describe('DecomposerSolver', () => {
  test('splitDocumentBudget gives earlier hops the remainder', () => {
    assert.deepEqual(splitDocumentBudget(10, 3), [4, 3, 3]);
    assert.deepEqual(splitDocumentBudget(6, 3), [2, 2, 2]);
    assert.deepEqual(splitDocumentBudget(2, 3), [1, 1, 0]);
    assert.deepEqual(splitDocumentBudget(0, 2), [0, 0]);
    assert.deepEqual(splitDocumentBudget(7, 1), [7]);
    assert.throws(() => splitDocumentBudget(-1, 2), RangeError);
    assert.throws(() => splitDocumentBudget(3, 0), (error: Error) => error instanceof RangeError && /count/.test(error.message));
    assert.throws(() => splitDocumentBudget(1.5, 2), TypeError);
  });

  test('#k references are replaced by earlier answers only', () => {
    assert.equal(resolveReferences('Where was #1 born, and is #2 near #1?', ['Ilsa', 'Quillmoor']), 'Where was Ilsa born, and is Quillmoor near Ilsa?');
    assert.equal(resolveReferences('#3 and #0 and #12', ['a']), '#3 and #0 and #12');
    assert.equal(resolveReferences('#10', Array.from({ length: 10 }, (_, i) => `a${i + 1}`)), 'a10');
    assert.throws(() => resolveReferences(1 as never, []), TypeError);
  });

  test('### sub-questions are parsed with their labels removed', () => {
    assert.deepEqual(parseSubquestions('Plan:\n### Q1: Who wrote X?\n### Q2: Where was #1 born?\n###\n### 3. Final #2?'),
      ['Who wrote X?', 'Where was #1 born?', 'Final #2?']);
    assert.deepEqual(parseSubquestions('no markers'), []);
  });

  test('the built-in corpus is consistent and BM25 finds each hop’s passage', () => {
    assert.ok(BUILTIN_CORPUS.length >= 40);
    assert.equal(new Set(BUILTIN_CORPUS.map((document) => document.id)).size, BUILTIN_CORPUS.length);
    assert.ok(BUILTIN_QUESTIONS.length >= 12);
    const byId = new Map(BUILTIN_CORPUS.map((document) => [document.id, document]));
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    assert.equal(retriever.size, BUILTIN_CORPUS.length);
    for (const question of BUILTIN_QUESTIONS) {
      assert.ok(question.steps.length >= 2, question.id);
      assert.equal(question.steps.at(-1)!.answer, question.answers[0], question.id);
      const answers: string[] = [];
      for (const step of question.steps) {
        const passage = byId.get(step.supportingId);
        assert.ok(passage !== undefined, `${question.id}: ${step.supportingId}`);
        assert.ok(passage.text.toLowerCase().includes(step.answer.toLowerCase()), `${question.id}: ${step.answer} in ${step.supportingId}`);
        const query = resolveReferences(step.question, answers);
        assert.doesNotMatch(query, /#\d/);
        const found = retriever.search(query, 3).map((document) => document.id);
        assert.ok(found.includes(step.supportingId), `${question.id}: "${query}" found ${found.join(', ')}`);
        answers.push(step.answer);
      }
    }
  });

  test('BM25 ranks, limits and validates', () => {
    const retriever = new Bm25Retriever([
      { id: 'a', title: 'Apples', text: 'Apples are red fruit.' },
      { id: 'b', title: 'Pears', text: 'Pears are green fruit, unlike apples.' },
      { id: 'c', title: 'Stones', text: 'Stones are grey.' },
    ]);
    const results = retriever.search('apples', 5);
    assert.deepEqual(results.map((document) => document.id), ['a', 'b']);
    assert.ok(results[0]!.score > results[1]!.score);
    assert.deepEqual(retriever.search('apples', 1).map((document) => document.id), ['a']);
    assert.deepEqual(retriever.search('the of which', 5), []);
    assert.deepEqual(retriever.search('apples', 0), []);
    assert.throws(() => retriever.search('x', -1), (error: Error) => error instanceof RangeError && /limit/.test(error.message));
    assert.throws(() => retriever.search(3 as never, 1), (error: Error) => error instanceof TypeError && /query/.test(error.message));
    assert.throws(() => new Bm25Retriever([{ id: 'a', title: '', text: '' }, { id: 'a', title: '', text: '' }]), (error: Error) => error instanceof RangeError && /documents\[1\]\.id/.test(error.message));
    assert.throws(() => new Bm25Retriever([{ id: 'a', title: 1 } as never]), /documents\[0\]\.title/);
    assert.throws(() => new Bm25Retriever([], { b: 2 }), (error: Error) => error instanceof RangeError && /options\.b/.test(error.message));
    assert.throws(() => new Bm25Retriever([], { k1: 0 }), RangeError);
  });

  test('one conversation: decomposition, retrieval per sub-question within the budget, #k answers, final answer', async () => {
    const policy = new ScriptedPolicy([
      '### Q1: Who wrote the novel The Glass Orchard?\n### Q2: In which town was #1 born?\n### Q3: In which country is the town #2?',
      'It was \\boxed{Ilsa Marrow}.',
      '\\boxed{Quillmoor}',
      '\\boxed{Valdoria}',
      'The author was born in \\boxed{Valdoria}.',
    ]);
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    const agent = new DecomposerSolver({ policy, retriever, documentBudget: 5 });
    const trajectory = await agent.run({ prompt: 'In which country was the author of The Glass Orchard born?', gold: ['Valdoria'] });
    const metadata = trajectory.metadata!;
    assert.deepEqual(metadata.allocation, [2, 2, 1]);
    assert.deepEqual(metadata.resolvedSubquestions, [
      'Who wrote the novel The Glass Orchard?', 'In which town was Ilsa Marrow born?', 'In which country is the town Quillmoor?',
    ]);
    assert.deepEqual(metadata.intermediateAnswers, ['Ilsa Marrow', 'Quillmoor', 'Valdoria']);
    assert.deepEqual((metadata.documentIds as string[][]).map((ids) => ids.length), [2, 2, 1]);
    assert.deepEqual((metadata.documentIds as string[][]).map((ids) => ids[0]), ['glass-orchard-novel', 'ilsa-marrow', 'quillmoor']);
    assert.equal(metadata.answer, 'Valdoria');
    assert.equal(trajectory.reward, 1);
    assert.equal(trajectory.turns.length, 5);
    assert.deepEqual(trajectory.turns.map((turn) => turn.response?.toolName), ['retrieve', 'retrieve', 'retrieve', 'user', undefined]);
    assert.match(trajectory.turns[1]!.response!.text, /\[1\] Ilsa Marrow: [\s\S]*Sub-question 2: In which town was Ilsa Marrow born\?/);
    assert.deepEqual(trajectory.turns.slice(0, 3).map((turn) => turn.response!.text.match(/^\[\d\]/gm)!.length), [2, 2, 1]);
    assert.match(trajectory.prompt, /Question: In which country was the author/);
    // The model saw exactly the trajectory so far.
    policy.calls.forEach((messages, k) => {
      assert.deepEqual(messages, toChatMessages({ ...trajectory, turns: trajectory.turns.slice(0, k) }));
    });
  });

  test('no ### markers: the question is the one sub-question; extra sub-questions are dropped', async () => {
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    const single = new ScriptedPolicy(['I will just look it up.', 'Osk', '\\boxed{1888}']);
    const trajectory = await new DecomposerSolver({ policy: single, retriever, documentBudget: 3 }).run({ prompt: 'When was Keswater Observatory founded?', gold: '1888' });
    assert.deepEqual(trajectory.metadata!.subquestions, []);
    assert.deepEqual(trajectory.metadata!.resolvedSubquestions, ['When was Keswater Observatory founded?']);
    assert.deepEqual(trajectory.metadata!.allocation, [3]);
    assert.equal(trajectory.reward, 1);
    const many = new ScriptedPolicy(['### a\n### b\n### c', 'A', 'B', 'final \\boxed{B}']);
    const capped = await new DecomposerSolver({ policy: many, retriever, maxSubquestions: 2, documentBudget: 0 }).run({ prompt: 'q' });
    assert.deepEqual(capped.metadata!.resolvedSubquestions, ['a', 'b']);
    assert.equal(capped.metadata!.droppedSubquestions, 1);
    assert.deepEqual(capped.metadata!.documentIds, [[], []]);
    assert.match(capped.turns[0]!.response!.text, /No documents\./);
  });

  test('m decompositions × m′ solutions become AceSearcher preference pairs', async () => {
    const question = 'In which country was the author of The Glass Orchard born?';
    const good = { text: '### Who wrote The Glass Orchard?\n### Where was #1 born?', tokenIds: [1, 2], logprobs: [-0.1, -0.2] };
    const bad = '### Where is the orchard?';
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    const episodes: Trajectory[] = [];
    const scripts = [
      [good, '\\boxed{Ilsa Marrow}', '\\boxed{Quillmoor}', '\\boxed{Valdoria}'],
      [good, '\\boxed{Sabine Roe}', '\\boxed{Dravenholm}', '\\boxed{Ostrand}'],
      [bad, '\\boxed{Dravenholm}', '\\boxed{Ostrand}'],
      [bad, '\\boxed{Lunport}', '\\boxed{Valdoria}'],
    ];
    for (const [decomposition, ...rest] of scripts) {
      const agent = new DecomposerSolver({ policy: new ScriptedPolicy(rest as string[]), retriever });
      const given = typeof decomposition === 'string' ? { text: decomposition } : decomposition!;
      episodes.push(await agent.run({ prompt: question, gold: 'Valdoria' }, { decomposition: given as Generation }));
    }
    assert.deepEqual(episodes[0]!.turns[0]!.action, good);
    assert.deepEqual(episodes.map((episode) => episode.reward), [1, 0, 0, 1]);
    const preference = decomposerPreferenceQuestion('q01', episodes);
    assert.deepEqual(preference.decompositions.map((d) => [d.text, d.solutions.length, d.subQuestions]), [
      [good.text, 2, ['Who wrote The Glass Orchard?', 'Where was #1 born?']], [bad, 2, ['Where is the orchard?']],
    ]);
    const { trajectory: solutionEpisode, ...solution } = preference.decompositions[0]!.solutions[1]!;
    assert.deepEqual(solution, { text: '\\boxed{Ostrand}', intermediateAnswers: ['Sabine Roe', 'Dravenholm'], reward: 0 });
    assert.equal(solutionEpisode, episodes[1]);
    const pairs = buildPreferencePairs(preference);
    // Equal mean rewards (0.5 and 0.5): no decomposition pair; within the first, two intermediate pairs and a final one,
    // each the turns as generated, in the context the chosen solution's solver saw.
    assert.deepEqual(pairs.map((pair) => [pair.kind, pair.step, pair.chosen, pair.rejected, pair.context!.turns.length]), [
      ['intermediate', 0, '\\boxed{Ilsa Marrow}', '\\boxed{Sabine Roe}', 1],
      ['intermediate', 1, '\\boxed{Quillmoor}', '\\boxed{Dravenholm}', 2],
      ['final', undefined, '\\boxed{Valdoria}', '\\boxed{Ostrand}', 3],
    ]);
    for (const pair of pairs) {
      assert.deepEqual(pair.context!.turns, episodes[0]!.turns.slice(0, pair.context!.turns.length));
      assert.deepEqual(pair.chosenAction, episodes[0]!.turns[pair.context!.turns.length]!.action);
      assert.deepEqual(pair.rejectedAction, episodes[1]!.turns[pair.context!.turns.length]!.action);
      assert.equal(pair.prompt, pair.context!.turns.at(-1)!.response!.text);
    }
    // The second hop's pair holds the documents retrieved for "Where was Ilsa Marrow born?" and the first answer.
    assert.match(pairs[1]!.prompt, /\[1\] Ilsa Marrow: [\s\S]*Sub-question 2: Where was Ilsa Marrow born\?/);
    assert.equal(pairs[1]!.context!.turns[1]!.action.text, '\\boxed{Ilsa Marrow}');
    assert.throws(() => decomposerPreferenceQuestion('q', []), RangeError);
    assert.throws(() => decomposerPreferenceQuestion('q', [{ ...episodes[0]!, reward: undefined }]), /trajectories\[0\]\.reward/);
    assert.throws(() => decomposerPreferenceQuestion('q', [episodes[0]!, { ...episodes[1]!, metadata: { ...episodes[1]!.metadata, question: 'other' } }]), /trajectories\[1\]\.metadata\.question/);
    const other = await new MultiTurnReasoner({ policy: new ScriptedPolicy(['\\boxed{1}']) }).run({ prompt: 'p', gold: '1' });
    assert.throws(() => decomposerPreferenceQuestion('q', [other]), (error: Error) => error instanceof TypeError && /trajectories\[0\]/.test(error.message));
    await assert.rejects(new DecomposerSolver({ policy: new ScriptedPolicy([]), retriever }).run({ prompt: 'q' }, { decomposition: {} as never }), /options\.decomposition\.text/);
  });

  test('AceSearcher defaults: 15 documents per question, reward EM × format', async () => {
    // ritaranx/AceSearcher commit 16a9b3c3, inference/main_qa.py: 5 passages per sub-question
    // for up to 3 sub-questions; rollout/create_train_data.py scores only an answer in its tags.
    assert.equal(DEFAULT_DOCUMENT_BUDGET, 15);
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    const script = (final: string) => new ScriptedPolicy([
      '### Who wrote the novel The Glass Orchard?\n### In which town was #1 born?\n### In which country is the town #2?',
      '\\boxed{Ilsa Marrow}', '\\boxed{Quillmoor}', '\\boxed{Valdoria}', final,
    ]);
    const task = { prompt: 'In which country was the author of The Glass Orchard born?', gold: 'Valdoria' };
    const boxed = await new DecomposerSolver({ policy: script('So \\boxed{Valdoria}.'), retriever }).run(task);
    assert.deepEqual(boxed.metadata!.allocation, [5, 5, 5]);
    assert.deepEqual((boxed.metadata!.documentIds as string[][]).map((ids) => ids.length), [5, 5, 5]);
    assert.equal(boxed.reward, 1);
    // The right answer without the answer format (a bare last line), or with an unclosed fence, earns nothing.
    const bare = await new DecomposerSolver({ policy: script('It must be\nValdoria'), retriever }).run(task);
    assert.deepEqual([bare.metadata!.answer, bare.reward], ['Valdoria', 0]);
    const unclosed = await new DecomposerSolver({ policy: script('```python\nx = 1\n\\boxed{Valdoria}'), retriever }).run(task);
    assert.deepEqual([unclosed.metadata!.answer, unclosed.reward], ['Valdoria', 0]);
    const tagged = await new DecomposerSolver({ policy: script('<answer>Valdoria</answer>'), retriever }).run(task);
    assert.equal(tagged.reward, 1);
    // Called directly, without the episode, it is the exact match.
    assert.equal(qaReward('the Valdoria', { gold: ['Valdoria'] }), 1);
    assert.equal(qaReward(null, { gold: 'x' }), 0);
  });

  test('the supervised first stage: reference solutions as episodes in the solver\'s own conversation', async () => {
    const retriever = new Bm25Retriever(BUILTIN_CORPUS);
    const episodes = await decomposerReferenceEpisodes(BUILTIN_QUESTIONS, { retriever });
    assert.equal(episodes.length, BUILTIN_QUESTIONS.length);
    assert.ok(episodes.every((episode) => episode.reward === 1));
    const [first] = episodes;
    const question = BUILTIN_QUESTIONS[0]!;
    assert.equal(first!.id, question.id);
    assert.equal(first!.turns.length, question.steps.length + 2);
    assert.deepEqual(first!.metadata!.intermediateAnswers, question.steps.map((step) => step.answer));
    assert.equal(first!.turns[1]!.action.text, `\\boxed{${question.steps[0]!.answer}}`);
    // The solver's real context: the documents retrieved for each resolved sub-question (15 in all).
    assert.equal((first!.metadata!.documentIds as string[][]).flat().length, 15);
    assert.ok((first!.metadata!.documentIds as string[][]).every((ids, k) => ids.includes(question.steps[k]!.supportingId)));
    // Another model's format: its own marker and answer markup, read back by the solver's options.
    const custom = await decomposerReferenceEpisodes(BUILTIN_QUESTIONS.slice(0, 1), {
      retriever, subquestionMarker: 'then', answer: (text) => text.replace(/<\/?ans>/g, '').trim(),
      format: { answer: (answer) => `<ans> ${answer} </ans>`, final: (answer) => `<ans> ${answer} </ans>` },
    });
    assert.match(custom[0]!.turns[0]!.action.text, /^then Q1: /);
    assert.deepEqual(custom[0]!.metadata!.resolvedSubquestions, first!.metadata!.resolvedSubquestions);
    assert.equal(custom[0]!.metadata!.answer, question.answers[0]);
    assert.deepEqual(parseSubquestions('then a ? then b ?', 'then'), ['a ?', 'b ?']);
    assert.throws(() => parseSubquestions('x', ''), (error: Error) => error instanceof RangeError && /marker/.test(error.message));
    assert.throws(() => new DecomposerSolver({ policy: new ScriptedPolicy([]), retriever, subquestionMarker: '' }), /options\.subquestionMarker/);
  });

  test('a cut-off turn ends the episode', async () => {
    const policy = new ScriptedPolicy(['### a\n### b', { text: 'partial', finishReason: 'length' }]);
    const trajectory = await new DecomposerSolver({ policy, retriever: new Bm25Retriever(BUILTIN_CORPUS) }).run({ prompt: 'q', gold: 'x' });
    assert.equal(trajectory.truncated, true);
    assert.equal(trajectory.turns.length, 2);
    assert.equal(trajectory.metadata!.answer, null);
    assert.equal(trajectory.reward, 0);
  });

  test('bad options', () => {
    const policy = new ScriptedPolicy([]);
    const retriever = new Bm25Retriever([]);
    assert.throws(() => new DecomposerSolver({ policy } as never), (error: Error) => error instanceof TypeError && /options\.retriever/.test(error.message));
    assert.throws(() => new DecomposerSolver({ policy, retriever, documentBudget: -2 }), (error: Error) => error instanceof RangeError && /options\.documentBudget/.test(error.message));
    assert.throws(() => new DecomposerSolver({ policy, retriever, prompts: { other: () => '' } as never }), /options\.prompts\.other/);
    assert.throws(() => new DecomposerSolver({ policy, retriever, prompts: { final: 'x' } as never }), (error: Error) => error instanceof TypeError && /options\.prompts\.final/.test(error.message));
  });
});

describe('TIRGen', () => {
  const tools = () => registry(fakePython() as Tool<never>);

  test('keeps only executable steps and verified solutions, as JSONL', async () => {
    // Task 1: the first refined step fails to run, is dropped and drafted again; verified.
    // Task 2: wrong final answer. Task 3: no draft gives code that runs.
    const generator = new ScriptedPolicy([
      'Compute 6*7.', 'Compute 6 times 7.', 'So \\boxed{42}',
      'Guess. \\boxed{5}',
      'Compute.', 'Compute again.',
    ]);
    const refiner = new ScriptedPolicy([
      `Compute: ${py('raise SyntaxError')}`, `Compute: ${py('print(42)')}`,
      py('raise ValueError'), py('raise ValueError'),
    ]);
    const tirgen = new TIRGen({ generator, refiner, tools: tools() });
    const output = new PassThrough();
    const tasks = [{ prompt: 'What is 6*7?', gold: '42', id: 't1' }, { prompt: 'p2', gold: '4', id: 't2' }, { prompt: 'p3', gold: '1', id: 't3' }];
    const report = await tirgen.generate(tasks, output);
    output.end();
    assert.deepEqual(report, {
      attempted: 3, kept: 1, discardedSteps: 3,
      outcomes: { 'verified': 1, 'wrong-answer': 1, 'no-answer': 0, 'not-executable': 1 },
    });
    const written: Trajectory[] = [];
    for await (const trajectory of readTrajectories(output)) written.push(trajectory);
    assert.equal(written.length, 1);
    const [solution] = written;
    assert.equal(solution!.id, 't1');
    assert.equal(solution!.reward, 1);
    assert.deepEqual(solution!.turns, [
      { action: { text: `Compute: ${py('print(42)')}` }, response: { toolName: 'python', status: 'success', text: '42\n' } },
      { action: { text: 'So \\boxed{42}' } },
    ]);
    assert.deepEqual(solution!.metadata, { agent: 'tirgen', outcome: 'verified', answer: '42', discardedSteps: 1 });
    // The generator's second draft of step 1 starts again from the empty solution.
    assert.deepEqual(assistantTexts(generator.calls[1]!), []);
    assert.deepEqual(assistantTexts(generator.calls[2]!), [`Compute: ${py('print(42)')}`]);
    assert.match(refiner.calls[0]![1]!.content!, /Problem:\nWhat is 6\*7\?\n\nStep:\nCompute 6\*7\./);
  });

  test('steps without code are kept as reasoning; maxSteps bounds a solution', async () => {
    const generator = new ScriptedPolicy(() => 'Think.');
    const refiner = new ScriptedPolicy(() => 'Thought, no code needed.');
    const result = await new TIRGen({ generator, refiner, tools: tools(), maxSteps: 3 }).construct({ prompt: 'p', gold: '1' });
    assert.equal(result.outcome, 'no-answer');
    assert.equal(result.kept, false);
    assert.equal(result.trajectory.turns.length, 3);
    assert.equal(result.trajectory.truncated, true);
    assert.equal(result.trajectory.reward, 0);
  });

  test('writes a file with the real sandbox', async (t) => {
    if (sandbox === undefined) return t.skip(sandboxProblem);
    const generator = new ScriptedPolicy(['Sum the first 100 integers.', 'Sum again.', 'Hence \\boxed{5050}']);
    const refiner = new ScriptedPolicy([py('print(sum(range(1, 101))'), py('print(sum(range(1, 101)))')]);
    const directory = mkdtempSync(join(tmpdir(), 'tirl-tirgen-'));
    try {
      const path = join(directory, 'data.jsonl');
      const tirgen = new TIRGen({ generator, refiner, tools: new ToolRegistry().register(codeExecutionTool(sandbox)) });
      const report = await tirgen.generate([{ prompt: 'Sum 1..100', gold: '5050' }], path);
      assert.equal(report.kept, 1);
      assert.equal(report.discardedSteps, 1);
      const written: Trajectory[] = [];
      for await (const trajectory of readTrajectories(path)) written.push(trajectory);
      assert.deepEqual(written[0]!.turns[0]!.response, { toolName: 'python', status: 'success', text: '5050\n' });
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  test('bad options and tasks', async () => {
    const policy = new ScriptedPolicy([]);
    assert.throws(() => new TIRGen({ generator: policy, refiner: policy }), (error: Error) => error instanceof RangeError && /options\.codeTool/.test(error.message));
    assert.throws(() => new TIRGen({ generator: policy, tools: tools() } as never), /options\.refiner/);
    const tirgen = new TIRGen({ generator: policy, refiner: policy, tools: tools() });
    await assert.rejects(tirgen.construct({ prompt: 'p' }), (error: Error) => error instanceof TypeError && /task\.gold/.test(error.message));
    await assert.rejects(tirgen.generate(5 as never, new PassThrough()), /tasks/);
  });
});

test('scripted generations are returned as copies', async () => {
  const shared: Generation = { text: 'a', tokenIds: [1] };
  const policy = new ScriptedPolicy([shared]);
  const generation = await policy.generate([]);
  generation.tokenIds!.push(2);
  assert.deepEqual(shared.tokenIds, [1]);
});
