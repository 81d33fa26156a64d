/**
 * `tirl serve`: command-line options, and a server that runs until SIGINT or SIGTERM.
 */
import { parseArgs } from 'node:util';
import { startServer, type ServeOptions } from './server.js';

const USAGE = `usage: tirl serve --port N [--host H] [--checkpoint DIR | --seed S] [--model NAME]

Serves the demo's policy in vLLM's format (/v1/completions with token-id prompts, logprobs,
return_tokens_as_token_ids, n; /v1/chat/completions; /v1/models; /health) and SGLang's
(/generate with input_ids, sampling_params, return_logprob; /get_model_info).

  --port N           port to listen on (0: a free one, printed)
  --host H           address to listen on (default 127.0.0.1)
  --checkpoint DIR   serve a trained policy: a directory its saveState wrote
  --seed S           seed of a fresh policy's weights and of unseeded requests (default 1)
  --model NAME       the served model's name (default tirl-demo)`;

function usageError(message: string): Error {
  return Object.assign(new Error(`${message}\n\n${USAGE}`), { usage: true });
}

/** Reads `tirl serve` options; 'help' for --help. @throws an Error marked `usage` for bad options. */
export function parseServeArgs(argv: string[]): ServeOptions | 'help' {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        port: { type: 'string' }, host: { type: 'string' }, checkpoint: { type: 'string' },
        seed: { type: 'string' }, model: { type: 'string' }, help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (error) {
    throw usageError(`tirl serve: ${(error as Error).message}`);
  }
  if (values.help === true) return 'help';
  const integer = (name: string, text: string | boolean | undefined, max: number): number | undefined => {
    if (text === undefined) return undefined;
    const value = Number(text);
    if (typeof text !== 'string' || !/^\d+$/.test(text) || value > max) throw usageError(`tirl serve: --${name} must be an integer in [0, ${max}], got '${String(text)}'`);
    return value;
  };
  const port = integer('port', values.port, 65535);
  if (port === undefined) throw usageError('tirl serve: --port is required');
  if (values.checkpoint !== undefined && values.seed !== undefined) throw usageError('tirl serve: give --checkpoint or --seed, not both');
  const options: ServeOptions = { port };
  if (typeof values.host === 'string') options.host = values.host;
  if (typeof values.checkpoint === 'string') options.checkpoint = values.checkpoint;
  const seed = integer('seed', values.seed, 2 ** 32 - 1);
  if (seed !== undefined) options.seed = seed;
  if (typeof values.model === 'string') options.model = values.model;
  return options;
}

/** Runs `tirl serve` until SIGINT or SIGTERM; resolves to the exit code. */
export async function runServe(argv: string[]): Promise<number> {
  const options = parseServeArgs(argv);
  if (options === 'help') {
    console.log(USAGE);
    return 0;
  }
  const server = await startServer(options);
  console.log(`tirl serve: ${server.model} at ${server.url} (vLLM /v1/completions, /v1/chat/completions, /v1/models; SGLang /generate)`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await server.close();
  return 0;
}
