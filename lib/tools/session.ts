/**
 * A stateful interpreter over a sandbox: the cells of one episode build on each other
 * (variables, imports, functions, files in /tmp), as multi-turn tool-integrated reasoning
 * expects, while every run is still a fresh sandboxed process under all of its limits.
 */
import type { CodeSandbox, SandboxResponse } from './sandbox.js';
import { checkString, rangeError } from '../check.js';

/** A Python string literal of `text` (JSON's escapes are Python's). */
function pythonString(text: string): string {
  return JSON.stringify(text);
}

/**
 * One episode's interpreter over a {@link CodeSandbox} (Python). State carries from cell to
 * cell by replay: each run first executes the earlier successful cells with their
 * `sys.stdout`/`sys.stderr` output discarded, then the new cell, in one fresh sandboxed
 * process. So a later cell sees everything earlier cells defined, imported or wrote under
 * /tmp, and prints only its own output; a failed cell leaves no state behind (it is not
 * replayed). The run's time and memory limits cover the replay as well; a cell whose effect
 * is not deterministic (random numbers without a seed, the clock) is recomputed, not
 * remembered. Tracebacks name cells `<cell N>`. The sandbox stays the caller's to close.
 */
export class SandboxSession {
  readonly #sandbox: CodeSandbox;
  readonly #cells: string[] = [];

  /** @throws RangeError when the sandbox does not run Python. */
  constructor(sandbox: CodeSandbox) {
    if (sandbox === null || typeof sandbox !== 'object' || typeof sandbox.run !== 'function' || sandbox.language !== 'python') {
      throw rangeError('sandbox', 'a PythonSandbox', (sandbox as CodeSandbox | null)?.language ?? sandbox);
    }
    this.#sandbox = sandbox;
  }

  /** The cells whose state later cells see, oldest first. */
  get cells(): readonly string[] {
    return this.#cells.slice();
  }

  /**
   * Runs `code` after the earlier cells; resolves as `CodeSandbox.run` does, with only this
   * cell's output. A successful cell joins the state.
   * @throws TypeError when `code` is not a string.
   */
  async run(code: string): Promise<SandboxResponse> {
    checkString('code', code);
    const response = await this.#sandbox.run(this.#program(code));
    if (response.status === 'success') this.#cells.push(code);
    return response;
  }

  /** Forgets the state (the next cell starts afresh). */
  close(): void {
    this.#cells.length = 0;
  }

  #program(code: string): string {
    const cell = (source: string, index: number) => `exec(compile(${pythonString(source)}, '<cell ${index + 1}>', 'exec'))`;
    if (this.#cells.length === 0) return cell(code, 0);
    return [
      'import sys as _tirl_sys, io as _tirl_io',
      '_tirl_streams = (_tirl_sys.stdout, _tirl_sys.stderr)',
      '_tirl_sys.stdout = _tirl_sys.stderr = _tirl_io.StringIO()',
      'try:',
      ...this.#cells.map((source, index) => `    ${cell(source, index)}`),
      'finally:',
      '    _tirl_sys.stdout, _tirl_sys.stderr = _tirl_streams',
      'del _tirl_sys, _tirl_io, _tirl_streams',
      cell(code, this.#cells.length),
    ].join('\n');
  }
}
