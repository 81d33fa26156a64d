import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { after, describe, test } from 'node:test';
import { feedbackMask } from '../lib/kernels/index.js';
import {
  fromChatMessages, loadTiktokenTokenizer, packTrajectories, parseTrajectory, readTrajectories, renderTrajectory,
  toChatMessages, writeTrajectories, type TrajectoryChatMessage, type Trajectory,
} from '../lib/sdk.js';
import { charTokenizer } from './tokenizers.js';


const chat: TrajectoryChatMessage[] = [
  { role: 'system', content: 'You are helpful.' },
  { role: 'user', content: 'What is 6*7?' },
  { role: 'assistant', content: 'Compute.', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'python', arguments: '{"code":"print(6*7)"}' } }] },
  { role: 'tool', content: '42', name: 'python', tool_call_id: 'c1', status: 'success' },
  { role: 'assistant', content: '```python\n1/0\n```' },
  { role: 'user', content: 'ZeroDivisionError', status: 'error' },
  { role: 'assistant', content: 'The answer is \\boxed{42}.' },
];

const scratch = mkdtempSync(join(tmpdir(), 'tirl-trajectory-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

describe('episode model and chat messages', () => {
  test('chat messages -> trajectory -> chat messages is lossless', () => {
    const trajectory = fromChatMessages(chat, { id: 'e1', reward: 1, groupId: 'q1' });
    assert.equal(trajectory.system, 'You are helpful.');
    assert.equal(trajectory.prompt, 'What is 6*7?');
    assert.equal(trajectory.turns.length, 3);
    assert.deepEqual(trajectory.turns[0]!.action.toolCall, { id: 'c1', name: 'python', arguments: '{"code":"print(6*7)"}' });
    assert.deepEqual(trajectory.turns[0]!.response, { toolName: 'python', status: 'success', text: '42', toolCallId: 'c1' });
    assert.deepEqual(trajectory.turns[1]!.response, { toolName: 'user', status: 'error', text: 'ZeroDivisionError' });
    assert.equal(trajectory.turns[2]!.response, undefined);
    assert.deepEqual(toChatMessages(trajectory), chat);
  });

  test('tool messages without status take the default', () => {
    const trajectory = fromChatMessages([
      { role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'tool', content: 'out' },
    ], { id: 'x', defaultStatus: 'timeout' });
    assert.equal(trajectory.turns[0]!.response!.status, 'timeout');
  });

  test('tool calls without an id get call_<turn> on export, as the format requires', () => {
    const messages = toChatMessages({ id: 'x', prompt: 'q', turns: [{ action: { text: '', toolCall: { name: 'search', arguments: '{}' } } }] });
    assert.equal(messages[1]!.tool_calls![0]!.id, 'call_0');
  });

  test('bad chat messages name the message', () => {
    assert.throws(() => fromChatMessages([{ role: 'assistant', content: 'a' }], { id: 'x' }), /messages\[0\]/);
    assert.throws(() => fromChatMessages([{ role: 'user', content: 'q' }, { role: 'tool', content: 'a' }], { id: 'x' }), /messages\[1\]\.role/);
    const two = { role: 'assistant' as const, content: '', tool_calls: [
      { id: 'a', type: 'function' as const, function: { name: 'a', arguments: '' } }, { id: 'b', type: 'function' as const, function: { name: 'b', arguments: '' } }] };
    assert.throws(() => fromChatMessages([{ role: 'user', content: 'q' }, two], { id: 'x' }), RangeError);
  });

  test('parseTrajectory validates and names the field', () => {
    const good = { id: 'a', prompt: 'p', turns: [{ action: { text: 't', tokenIds: [1, 2], logprobs: [-0.5, -1] } }] };
    assert.deepEqual(parseTrajectory(good), good);
    assert.throws(() => parseTrajectory({ ...good, turns: [{ action: { text: 1 } }] }), /trajectory\.turns\[0\]\.action\.text/);
    assert.throws(() => parseTrajectory({ id: 'a', prompt: 'p', turns: [{ action: { text: '' }, response: { toolName: 't', status: 'ok', text: '' } }] }), /status/);
    assert.throws(() => parseTrajectory({ id: 'a', prompt: 'p', turns: [{ action: { text: '', tokenIds: [1], logprobs: [0, 0] } }] }), RangeError);
    assert.throws(() => parseTrajectory({ id: 'a', prompt: 'p', turns: [{ action: { text: '', logprobs: [0] } }] }), /tokenIds/);
    assert.throws(() => parseTrajectory(null), TypeError);
    assert.throws(() => parseTrajectory({ id: 'a', prompt: 'p', turns: [], reward: Number.NaN }), /reward/);
  });
});

describe('JSONL streaming', () => {
  const trajectory = fromChatMessages(chat, { id: 'e1', reward: 1, groupId: 'q1', metadata: { source: 'test' } });

  test('trajectories -> JSONL -> trajectories round-trips', async () => {
    const path = join(scratch, 'round.jsonl');
    const written = await writeTrajectories(path, [trajectory, { ...trajectory, id: 'e2' }]);
    assert.equal(written, 2);
    const read: Trajectory[] = [];
    for await (const t of readTrajectories(path)) read.push(t);
    assert.deepEqual(read, [trajectory, { ...trajectory, id: 'e2' }]);
  });

  test('streams many episodes from a generator and back, one at a time', async () => {
    const path = join(scratch, 'many.jsonl');
    function* episodes() {
      for (let i = 0; i < 20_000; i++) yield { id: `e${i}`, prompt: 'p', turns: [{ action: { text: `a${i}` } }], reward: i % 2 };
    }
    assert.equal(await writeTrajectories(path, episodes()), 20_000);
    let count = 0;
    let rewardSum = 0;
    for await (const t of readTrajectories(path)) {
      count++;
      rewardSum += t.reward!;
    }
    assert.equal(count, 20_000);
    assert.equal(rewardSum, 10_000);
  });

  test('invalid UTF-8 bytes decode to U+FFFD instead of failing', async () => {
    const path = join(scratch, 'bytes.jsonl');
    const line = Buffer.concat([Buffer.from('{"id":"b","prompt":"x'), Buffer.from([0xff, 0xc3, 0x28]), Buffer.from('y","turns":[]}\n')]);
    writeFileSync(path, line);
    const read: Trajectory[] = [];
    for await (const t of readTrajectories(path)) read.push(t);
    assert.equal(read.length, 1);
    assert.match(read[0]!.prompt, /^x\uFFFD+\(y$/);
  });

  test('invalid lines throw with their line number, or are skipped and reported', async () => {
    const text = '{"id":"a","prompt":"p","turns":[]}\n\n{"id":\n{"id":"c","prompt":"p","turns":[{}]}\n{"id":"d","prompt":"p","turns":[]}\n';
    await assert.rejects(async () => {
      for await (const _ of readTrajectories(Readable.from([text]))) void _;
    }, /line 3/);
    const skipped: number[] = [];
    const ids: string[] = [];
    for await (const t of readTrajectories(Readable.from([text]), { invalidLines: 'skip', onInvalidLine: ({ lineNumber }) => skipped.push(lineNumber) })) ids.push(t.id);
    assert.deepEqual(ids, ['a', 'd']);
    assert.deepEqual(skipped, [3, 4]);
  });

  test('lone surrogates survive a JSONL round trip without throwing', async () => {
    const path = join(scratch, 'surrogate.jsonl');
    await writeTrajectories(path, [{ id: 's', prompt: 'a\uD800b', turns: [] }]);
    assert.match(readFileSync(path, 'utf8'), /\\ud800/);
    for await (const t of readTrajectories(path)) assert.equal(t.prompt, 'a\uD800b');
  });
});

describe('tokenizer', async () => {
  const tokenizer = await loadTiktokenTokenizer('cl100k_base');

  test('encodes and decodes offline with the real cl100k vocabulary', () => {
    assert.deepEqual(tokenizer.encode('Hello, world!'), [9906, 11, 1917, 0]);
    assert.equal(tokenizer.decode(tokenizer.encode('def f(x):\n    return x**2  # ünïcode 𝔘')), 'def f(x):\n    return x**2  # ünïcode 𝔘');
    assert.equal(tokenizer.specialTokenId('<|im_end|>'), 100265);
    assert.equal(tokenizer.vocabSize, 100277);
    assert.throws(() => tokenizer.specialTokenId('<|nope|>'), RangeError);
  });

  test('special-token text inside content is ordinary text', () => {
    const ids = tokenizer.encode('a<|im_end|>b');
    assert.ok(!ids.includes(100265));
    assert.equal(tokenizer.decode(ids), 'a<|im_end|>b');
  });

  test('megabyte runs tokenize in bounded time and decode exactly', () => {
    for (const text of ['a'.repeat(1 << 20), '\n'.repeat(1 << 20), '='.repeat(1 << 18) + 'x' + 'é'.repeat(1 << 16), '𝔘'.repeat(50_000)]) {
      const start = performance.now();
      const ids = tokenizer.encode(text);
      assert.ok(performance.now() - start < 10_000);
      assert.equal(tokenizer.decode(ids), text);
    }
  });

  test('lone surrogates do not throw', () => {
    assert.equal(tokenizer.decode(tokenizer.encode('x\uD800y')), 'x\uFFFDy');
  });

  test('o200k loads too', async () => {
    const o200k = await loadTiktokenTokenizer('o200k_base');
    assert.equal(o200k.decode(o200k.encode('tool use')), 'tool use');
    assert.equal(o200k.specialTokenId('<|im_start|>'), 200019);
  });
});

describe('template and packing', () => {
  // Hand-worked with one token per character: prompt "<s>user\nQ<e>\n<s>assistant\n".
  const episode: Trajectory = {
    id: 'h', prompt: 'Q', reward: 1, groupId: 'g',
    turns: [
      { action: { text: 'ab', tokenIds: [7, 8, 1001], logprobs: [-0.1, -0.2, -0.3] }, response: { toolName: 'python', status: 'success', text: 'ok' } },
      { action: { text: 'c' } },
    ],
  };
  const promptLength = 1 + 'user\nQ'.length + 1 + 1 + 1 + 'assistant\n'.length; // 20
  const feedbackLength = 1 + 1 + 'user\n<tool_response>\nok\n</tool_response>'.length + 1 + 1 + 1 + 'assistant\n'.length;

  test('renders roles and turn spans as counted by hand', () => {
    const r = renderTrajectory(episode, charTokenizer);
    assert.equal(promptLength, 20);
    const expectedRoles = [
      ...new Array(promptLength).fill(0), 1, 1, 1, ...new Array(feedbackLength).fill(2), 1, 1,
    ];
    assert.deepEqual(r.roles, expectedRoles);
    assert.deepEqual(r.turnStarts, [20, 23 + feedbackLength]);
    assert.deepEqual(r.turnActionEnds, [23, 25 + feedbackLength]);
    assert.deepEqual(r.turnEnds, [23 + feedbackLength, 25 + feedbackLength]);
    assert.deepEqual(r.tokens.slice(20, 23), [7, 8, 1001]);
    assert.deepEqual(r.tokens.slice(-2), ['c'.charCodeAt(0), 1001]);
    assert.deepEqual(r.logprobs.slice(20, 23).map((x) => Math.round(x * 10) / 10), [-0.1, -0.2, -0.3]);
    assert.equal(charTokenizer.decode(r.tokens.slice(0, promptLength)), '<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n');
  });

  test('packs ragged and padded batches; truncation is flagged', () => {
    const short: Trajectory = { id: 's', prompt: 'Q', turns: [{ action: { text: 'z' } }], reward: 0, groupId: 'g' };
    const total = promptLength + 5 + feedbackLength;
    const ragged = packTrajectories([episode, short], { tokenizer: charTokenizer });
    assert.deepEqual(Array.from(ragged.seqOffsets), [0, total, total + promptLength + 2]);
    assert.deepEqual(Array.from(ragged.actionTokenCounts), [5, 2]);
    assert.deepEqual(Array.from(ragged.groupIds), [0, 0]);
    assert.deepEqual(Array.from(ragged.rewards), [1, 0]);
    assert.deepEqual(Array.from(ragged.turnOffsets), [0, 2, 3]);
    assert.equal(ragged.paddedLength, null);
    assert.ok(Math.abs(ragged.behaviourLogprobs[21]! + 0.2) < 1e-6);
    assert.equal(ragged.behaviourLogprobs.reduce((sum, x, t) => sum + (ragged.roles[t] === 1 ? 0 : Math.abs(x)), 0), 0);

    const padded = packTrajectories([episode, short], { tokenizer: charTokenizer, padding: 'longest', padTokenId: 999 });
    assert.deepEqual(Array.from(padded.seqOffsets), [0, total, 2 * total]);
    assert.equal(padded.roles[2 * total - 1], 3);
    assert.equal(padded.tokens[2 * total - 1], 999);
    assert.equal(padded.turnStarts[2], total + promptLength);

    const fixed = packTrajectories([episode, short], { tokenizer: charTokenizer, padding: 30 });
    assert.deepEqual(Array.from(fixed.seqOffsets), [0, 30, 60]);
    assert.deepEqual(Array.from(fixed.truncated), [1, 0]);
    assert.equal(fixed.paddedLength, 30);
    assert.deepEqual(Array.from(fixed.roles.subarray(30 + promptLength + 2)), new Array(30 - promptLength - 2).fill(3));

    const cut = packTrajectories([episode, short], { tokenizer: charTokenizer, maxLength: 22 });
    assert.deepEqual(Array.from(cut.truncated), [1, 0]);
    assert.deepEqual(Array.from(cut.lengths), [22, promptLength + 2]);
    assert.equal(cut.fullLengths[0], total);
    assert.deepEqual(Array.from(cut.actionTokenCounts), [2, 2]);
    assert.deepEqual(Array.from(cut.turnStarts.subarray(0, 2)), [20, 22]);
    assert.deepEqual(Array.from(cut.turnActionEnds.subarray(0, 2)), [22, 22]);
  });

  test('feedbackMask over a packed batch keeps exactly the action tokens of kept episodes', () => {
    const batch = packTrajectories([episode, episode], { tokenizer: charTokenizer, padding: 'longest' });
    const { mask, actionTokens } = feedbackMask({ roles: batch.roles, seqOffsets: batch.seqOffsets, keep: Uint8Array.of(1, 0) });
    assert.deepEqual(Array.from(actionTokens), [5, 0]);
    assert.deepEqual(Array.from(mask), Array.from(batch.roles, (role, t) => (role === 1 && t < batch.seqOffsets[1]! ? 1 : 0)));
  });

  test('bad packing options name the option', () => {
    assert.throws(() => packTrajectories([episode], { tokenizer: charTokenizer, maxLength: 0 }), /options\.maxLength/);
    assert.throws(() => packTrajectories([episode], {} as never), /Expected a Tokenizer for options\.tokenizer/);
    assert.throws(() => packTrajectories([episode], { tokenizer: charTokenizer, padding: -1 }), /options\.padding/);
    assert.throws(() => packTrajectories([{ ...episode, turns: [{ action: { text: '', tokenIds: [1], logprobs: [0, 0] } }] }], { tokenizer: charTokenizer }), /trajectories\[0\]/);
  });
});

describe('round trip: chat -> trajectory -> JSONL -> batch', async () => {
  const tokenizer = await loadTiktokenTokenizer();
  test('megabyte outputs, unclosed fences and empty turns pack without throwing; the cut is flagged', () => {
    const garbage: Trajectory = { id: 'g', prompt: '', reward: 0, turns: [
      { action: { text: '' } },
      { action: { text: '```python\n' + 'x = 1\n'.repeat(200_000) }, response: { toolName: 'python', status: 'timeout', text: '' } },
      { action: { text: 'é'.repeat(1 << 19) + '\uD800' } },
    ] };
    const batch = packTrajectories([garbage], { tokenizer, maxLength: 4096 });
    assert.equal(batch.truncated[0], 1);
    assert.equal(batch.lengths[0], 4096);
    assert.ok(batch.fullLengths[0]! > 4096);
    assert.equal(batch.turnStarts[2], batch.turnEnds[2]); // the third turn lies wholly past the cut
  });

  test('the batch decodes back to the episode', async () => {
    const path = join(scratch, 'chain.jsonl');
    await writeTrajectories(path, [fromChatMessages(chat, { id: 'e1', reward: 1 })]);
    const trajectories: Trajectory[] = [];
    for await (const t of readTrajectories(path)) trajectories.push(t);
    const batch = packTrajectories(trajectories, { tokenizer });
    const decode = (from: number, to: number) => tokenizer.decode(Array.from(batch.tokens.subarray(from, to)));
    assert.equal(decode(batch.turnStarts[1]!, batch.turnActionEnds[1]!), '```python\n1/0\n```<|im_end|>');
    assert.equal(decode(batch.turnStarts[2]!, batch.turnActionEnds[2]!), 'The answer is \\boxed{42}.<|im_end|>');
    assert.equal(decode(batch.turnActionEnds[0]!, batch.turnEnds[0]!), '\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
    assert.ok(decode(batch.turnStarts[0]!, batch.turnActionEnds[0]!).includes('"name":"python"'));
    assert.equal(decode(0, batch.turnStarts[0]!), '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 6*7?<|im_end|>\n<|im_start|>assistant\n');
    assert.deepEqual(toChatMessages(batch.trajectories[0]!), chat);
  });
});

describe('example', () => {
  test('examples/trajectories/train_step runs: filter report and a finite loss', () => {
    const script = fileURLToPath(new URL('../examples/trajectories/train_step.js', import.meta.url));
    const run = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /void-turn +flagged 1 +removed 1 trajectories/);
    assert.match(run.stdout, /equal-reward-group +flagged 2 +removed 2 trajectories/);
    assert.match(run.stdout, /kept 6\/10 trajectories/);
    const loss = /ppoLoss: loss (\S+)/.exec(run.stdout);
    assert.ok(loss !== null && Number.isFinite(Number(loss[1])));
  });
});
