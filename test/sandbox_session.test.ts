/**
 * SandboxSession: a stateful Python interpreter across the cells of an episode (SimpleTIR's
 * multi-turn TIR builds on earlier cells), each run still a fresh sandboxed process under
 * the sandbox's time, memory, file and network limits.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test, type TestContext } from 'node:test';

import { MultiTurnReasoner, ScriptedPolicy } from '../lib/agents/index.js';
import { PythonSandbox, SandboxSession, SandboxUnavailableError } from '../lib/tools/index.js';

let sandbox: PythonSandbox | undefined;
let problem = '';

before(async () => {
  // 5 s a cell: a cell replays the session's earlier cells in a fresh sandboxed process, on a
  // loaded 2-core CI machine too. Only a machine that cannot run the sandbox skips; a sandbox
  // that starts but fails its probe fails the file rather than skipping it.
  let candidate: PythonSandbox | undefined;
  try {
    candidate = new PythonSandbox({ timeoutMs: 5000, memoryMb: 256, concurrency: 1 });
    const probe = await candidate.run('print(1)');
    if (probe.status !== 'success') throw new Error(`the sandbox answered ${probe.status}: ${probe.error ?? ''}`);
    sandbox = candidate;
  } catch (error) {
    await candidate?.close();
    if (!(error instanceof SandboxUnavailableError)) throw error;
    problem = `no sandbox here: ${error.message}`;
  }
});

after(async () => {
  await sandbox?.close();
});

function need(t: TestContext): PythonSandbox | undefined {
  if (sandbox === undefined) t.skip(problem);
  return sandbox;
}

describe('SandboxSession', () => {
  test('later cells see earlier cells\' variables, imports, functions and files; each prints only its own output', async (t) => {
    const box = need(t);
    if (box === undefined) return;
    const session = new SandboxSession(box);
    assert.equal((await session.run('import math\nx = 6\nprint("first")')).result, 'first\n');
    assert.equal((await session.run('def double(v):\n    return 2 * v\nopen("/tmp/note", "w").write("kept")')).status, 'success');
    const third = await session.run('print(double(x) + int(math.sqrt(x * x)), open("/tmp/note").read())');
    assert.deepEqual([third.status, third.result], ['success', '18 kept\n']);
    assert.equal(session.cells.length, 3);
    // A fresh run of the sandbox (today's code tool) has none of it.
    assert.match((await box.run('print(x)')).error ?? '', /NameError/);
  });

  test('a failed cell leaves no state and names its cell; the session goes on', async (t) => {
    const box = need(t);
    if (box === undefined) return;
    const session = new SandboxSession(box);
    await session.run('y = 1');
    const failed = await session.run('y = 100\nraise ValueError("bad")');
    assert.equal(failed.status, 'error');
    assert.match(failed.error ?? '', /<cell 2>[\s\S]*ValueError: bad/);
    assert.equal((await session.run('print(y)')).result, '1\n');
    session.close();
    assert.match((await session.run('print(y)')).error ?? '', /NameError/);
  });

  test('the sandbox\'s limits hold for a session: time, memory, network, files outside /tmp', async (t) => {
    const box = need(t);
    if (box === undefined) return;
    const session = new SandboxSession(box);
    await session.run('z = 3');
    assert.equal((await session.run('while True: pass')).status, 'timeout');
    assert.equal((await session.run('b = bytearray(1 << 30)')).status, 'error');
    const network = await session.run('import socket\nsocket.create_connection(("1.1.1.1", 80), timeout=2)');
    assert.equal(network.status, 'error');
    assert.equal((await session.run('open("/usr/evil", "w")')).status, 'error');
    // None of the failed cells joined the state; the first still did.
    assert.deepEqual(session.cells, ['z = 3']);
    assert.equal((await session.run('print(z)')).result, '3\n');
  });

  test('an agent keeps one session per episode: state across turns, none across episodes', async (t) => {
    const box = need(t);
    if (box === undefined) return;
    const fence = (code: string) => '```python\n' + code + '\n```';
    const policy = new ScriptedPolicy([fence('n = 20'), fence('print(n + 1)'), '\\boxed{21}', fence('print(n)'), '\\boxed{0}']);
    const agent = new MultiTurnReasoner({ policy, codeSession: () => new SandboxSession(box), codeFence: 'python' });
    const first = await agent.run({ prompt: 'p', gold: '21' });
    assert.deepEqual(first.turns.map((turn) => turn.response?.text), ['', '21\n', undefined]);
    assert.equal(first.reward, 1);
    const second = await agent.run({ prompt: 'p' });
    assert.equal(second.turns[0]!.response!.status, 'error');
    assert.match(second.turns[0]!.response!.text, /NameError/);
  });

  test('refuses a sandbox that does not run Python', () => {
    assert.throws(() => new SandboxSession({ language: 'javascript', run: async () => ({}) } as never), /Expected a PythonSandbox for sandbox/);
  });
});
