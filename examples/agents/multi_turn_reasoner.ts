/**
 * AlphaApollo's multi-turn reasoner with a typed tool, offline: a scripted policy reasons,
 * calls a unit-conversion tool, reads its answer and gives the final answer. The trajectory
 * keeps each action apart from the tool's response; its turn-level credit follows.
 *
 * Run: npx tsc -p tsconfig.json && node dist/examples/agents/multi_turn_reasoner.js
 */
import { MultiTurnReasoner, ScriptedPolicy } from '../../lib/agents/index.js';
import { turnLevelCredit } from '../../lib/credit/index.js';
import { ToolRegistry, type Tool } from '../../lib/tools/index.js';

const convert: Tool<{ miles: number }> = {
  name: 'miles_to_km',
  description: 'Converts a distance in miles to kilometres',
  parameters: { type: 'object', properties: { miles: { type: 'number' } }, required: ['miles'] },
  async call({ miles }) {
    return { status: 'success', result: (miles * 1.609344).toFixed(3) };
  },
};

const policy = new ScriptedPolicy([
  'A marathon is 26.2 miles; I need it in kilometres.',
  { text: 'Converting.', toolCall: { id: 'call_1', name: 'miles_to_km', arguments: '{"miles": "26.2"}' } },
  { text: 'The tool wants a number.', toolCall: { id: 'call_2', name: 'miles_to_km', arguments: '{"miles": 26.2}' } },
  'That is about 42.2 km, so the answer is \\boxed{42.2}.',
]);
const reasoner = new MultiTurnReasoner({ policy, tools: new ToolRegistry().register(convert), maxTurns: 6 });
const trajectory = await reasoner.run({ prompt: 'How long is a marathon in kilometres, to one decimal?', gold: '42.2' });

trajectory.turns.forEach((turn, t) => {
  const call = turn.action.toolCall === undefined ? '' : ` [calls ${turn.action.toolCall.name}(${turn.action.toolCall.arguments})]`;
  console.log(`turn ${t + 1} action: ${turn.action.text}${call}`);
  if (turn.response !== undefined) console.log(`       ${turn.response.toolName} (${turn.response.status}): ${turn.response.text}`);
});
console.log(`answer ${trajectory.metadata!.answer}, reward ${trajectory.reward}`);
console.log('turn credit:', turnLevelCredit(trajectory).map((credit) => credit.toFixed(4)).join(' '));
