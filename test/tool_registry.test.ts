import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { PythonSandbox, ToolRegistry, codeExecutionTool, type Tool } from '../lib/tools/index.js';

const adder: Tool<{ a: number; b: number }> = {
  name: 'add',
  description: 'Adds two numbers',
  parameters: {
    type: 'object',
    properties: { a: { type: 'number' }, b: { type: 'number' } },
    required: ['a', 'b'],
  },
  async call({ a, b }) {
    return { status: 'success', result: String(a + b) };
  },
};

const unit: Tool<{ unit: string }> = {
  name: 'unit',
  description: 'Echoes a unit',
  parameters: { type: 'object', properties: { unit: { type: 'string', enum: ['m', 's'] } } },
  async call() {
    throw new Error('the unit service is down');
  },
};

describe('ToolRegistry', () => {
  test('lists tools in the OpenAI tools format', () => {
    const registry = new ToolRegistry().register(adder).register(unit);
    assert.deepEqual(registry.names, ['add', 'unit']);
    assert.ok(registry.has('add'));
    assert.deepEqual(registry.toOpenAITools()[0], {
      type: 'function',
      function: { name: 'add', description: 'Adds two numbers', parameters: adder.parameters },
    });
  });

  test('calls a tool with object or JSON-text arguments', async () => {
    const registry = new ToolRegistry().register(adder);
    assert.deepEqual(await registry.call('add', { a: 2, b: 3 }), { tool: 'add', status: 'success', result: '5' });
    assert.deepEqual(await registry.callToolCall({ id: 'call_1', type: 'function', function: { name: 'add', arguments: '{"a":1,"b":1.5}' } }),
      { tool: 'add', status: 'success', result: '2.5' });
  });

  test('turns the model\'s mistakes and failing tools into error responses', async () => {
    const registry = new ToolRegistry().register(adder).register(unit);
    assert.deepEqual(await registry.call('mul', {}), { tool: 'mul', status: 'error', error: 'Unknown tool "mul"; available tools: add, unit' });
    assert.match((await registry.call('add', '{"a": 1,')).error!, /^Arguments are not valid JSON/);
    assert.equal((await registry.call('add', '[1, 2]')).error, 'Arguments must be a JSON object');
    assert.equal((await registry.call('add', { a: 1 })).error, 'Invalid arguments: missing required argument "b"');
    assert.equal((await registry.call('add', { a: 1, b: '2' })).error, 'Invalid arguments: argument "b" must be of type number');
    assert.equal((await registry.call('unit', { unit: 'kg' })).error, 'Invalid arguments: argument "unit" must be one of ["m","s"]');
    assert.deepEqual(await registry.call('unit', { unit: 'm' }), { tool: 'unit', status: 'error', error: 'the unit service is down' });
    assert.equal((await registry.call('unit', '')).error, 'the unit service is down');
  });

  test('refuses malformed tools and duplicate names', () => {
    const registry = new ToolRegistry().register(adder);
    assert.throws(() => registry.register(adder), /already registered/);
    assert.throws(() => registry.register({ ...adder, name: 'has space' }), { name: 'TypeError', message: /tool\.name/ });
    assert.throws(() => registry.register({ ...adder, name: 'x', call: undefined } as unknown as Tool), { name: 'TypeError', message: /tool\.call/ });
    assert.throws(() => registry.register(null as unknown as Tool), { name: 'TypeError', message: 'Expected an object for tool but received null of type null' });
  });
});

describe('codeExecutionTool', () => {
  const sandbox = new PythonSandbox({ concurrency: 1, timeoutMs: 2000 });
  after(() => sandbox.close());

  test('runs the model\'s code through the registry', async () => {
    const registry = new ToolRegistry().register(codeExecutionTool(sandbox));
    assert.deepEqual(registry.names, ['python']);
    const spec = registry.toOpenAITools()[0]!;
    assert.deepEqual(spec.function.parameters.required, ['code']);
    assert.deepEqual(await registry.call('python', JSON.stringify({ code: 'print(sum(range(10)))' })),
      { tool: 'python', status: 'success', result: '45\n' });
    const failed = await registry.call('python', { code: 'import math\nmath.sqrt(-1)' });
    assert.equal(failed.status, 'error');
    assert.match(failed.error!, /ValueError: math domain error/);
    assert.equal((await registry.call('python', { code: 7 })).error, 'Invalid arguments: argument "code" must be of type string');
  });
});
