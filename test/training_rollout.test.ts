/**
 * Rollouts with a scripted (non-neural) policy: token roles, turns and tool status, rewards,
 * and the turn and token limits that truncate an episode.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { Role } from '../lib/index.js';
import { type Policy, rollout, SeededRandom } from '../lib/training/index.js';
import { type Product, ProductEnvironment, Token, tokenizer } from '../examples/training/arithmetic.js';

/** Plays fixed action tokens, one turn each; only sampling is used by rollouts. */
function scripted(actions: number[][]): Policy {
  const unused = () => {
    throw new Error('not used by rollouts');
  };
  return {
    encode: (text, role) => tokenizer.encode(text, role),
    sampleTurns: async (contexts) =>
      contexts.map((context) => {
        const turn = context.filter((t) => t !== Token.toolOk && t !== Token.toolError).length - 1;
        const script = actions[turn] ?? [Token.think];
        const tokens = Int32Array.from(script);
        return { tokens, logprobs: Float32Array.from(script, () => -0.5), text: tokenizer.decode(tokens) };
      }),
    logprobs: unused,
    accumulateGradients: unused,
    applyGradients: unused,
    frozenCopy: unused,
    saveState: unused,
    loadState: unused,
  };
}

const problem: Product = { a: 12, b: 34 };
const limits = { maxTurns: 4, maxTurnTokens: 4, maxTokens: 100 };

describe('rollout', () => {
  it('records roles, turns, tool status, reward and success of a solved episode', async () => {
    const [episode] = await rollout(scripted([[Token.brokenCode], [Token.code], [Token.answer]]), [new ProductEnvironment()], [problem], [0], limits, new SeededRandom(1));
    assert.deepEqual([...episode.tokens], [Token.prompt, Token.brokenCode, Token.toolError, Token.code, Token.toolOk, Token.answer]);
    assert.deepEqual([...episode.roles], [Role.prompt, Role.action, Role.feedback, Role.action, Role.feedback, Role.action]);
    assert.deepEqual([...episode.behaviourLogp], [0, -0.5, 0, -0.5, 0, -0.5]);
    assert.deepEqual(episode.turns.map((t) => t.tool?.status), ['error', 'success', undefined]);
    assert.deepEqual(episode.turns.map((t) => [t.actionStart, t.actionEnd]), [[1, 2], [3, 4], [5, 6]]);
    assert.equal(episode.turns[1].feedback, '408');
    assert.deepEqual([episode.reward, episode.success, episode.done, episode.truncated], [1, true, true, false]);
  });

  it('truncates at the turn limit and at the token limit', async () => {
    const [byTurns] = await rollout(scripted([[Token.think], [Token.think]]), [new ProductEnvironment()], [problem], [0], { ...limits, maxTurns: 2 }, new SeededRandom(1));
    assert.deepEqual([byTurns.done, byTurns.truncated, byTurns.success, byTurns.turns.length], [false, true, false, 2]);

    const long = [Token.code, Token.code, Token.code, Token.code];
    const [byTokens] = await rollout(scripted([long, long]), [new ProductEnvironment()], [problem], [0], { ...limits, maxTokens: 7 }, new SeededRandom(1));
    assert.equal(byTokens.tokens.length, 7);
    assert.equal(byTokens.truncated, true);
    assert.ok(byTokens.turns.every((t) => t.actionEnd <= 7));
  });

  it('plays episodes in lock step, one sampling call per turn', async () => {
    let calls = 0;
    const policy = scripted([[Token.code], [Token.answer]]);
    const counting: Policy = { ...policy, sampleTurns: (contexts, options) => (calls++, policy.sampleTurns(contexts, options)) };
    const environments = [0, 1, 2].map(() => new ProductEnvironment());
    const episodes = await rollout(counting, environments, [problem, { a: 2, b: 3 }, problem], [0, 1, 0], limits, new SeededRandom(1));
    assert.equal(calls, 2);
    assert.deepEqual(episodes.map((e) => e.group), [0, 1, 0]);
    assert.ok(episodes.every((e) => e.success));
  });
});
