/**
 * The `tirl` command (bin/tirl.js): `tirl demo`, `tirl serve`, `tirl bench`, `tirl info`, `tirl help`. Each command
 * loads what it needs on demand, so `tirl help` works even where the addon does not load.
 */

const USAGE = `Usage: tirl <command> [options]

Commands:
  bench    measure the kernels against TypeScript, PyTorch and memory bandwidth
           (tirl bench --help for its options; --quick for a short run)
  info     print the version, threads, SIMD path and build of the native library
  demo     train a small tool-using policy with GRPO and evaluate it on held-out
           problems (tirl demo --help for its options; --quick for a short run)
  serve    serve the demo's policy in vLLM's and SGLang's HTTP formats, token ids in
           and out (tirl serve --port N [--checkpoint DIR | --seed S]; --help for more)
  help     this text`;

/** Runs one command line (without `node` and the script); resolves to the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'bench': {
        const { runBench } = await import('../benchmarks/run.js');
        return await runBench(rest);
      }
      case 'info': {
        const { info } = await import('../lib/index.js');
        console.log(JSON.stringify(info(), null, 2));
        return 0;
      }
      case 'demo': {
        const demo = await import('./demo/index.js').catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'ERR_MODULE_NOT_FOUND' || !/@tensorflow/.test(error.message)) throw error;
          console.error(
            'tirl demo: it trains a TensorFlow.js policy; install its optional peers first:\n' +
              '  npm install @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-wasm@4.22.0',
          );
          return undefined;
        });
        if (demo === undefined) return 1;
        await demo.runDemo(rest);
        return 0;
      }
      case 'serve': {
        const serve = await import('./serve/index.js').catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'ERR_MODULE_NOT_FOUND' || !/@tensorflow/.test(error.message)) throw error;
          console.error(
            'tirl serve: it serves a TensorFlow.js policy; install its optional peers first:\n' +
              '  npm install @tensorflow/tfjs@4.22.0 @tensorflow/tfjs-backend-wasm@4.22.0',
          );
          return undefined;
        });
        if (serve === undefined) return 1;
        return await serve.runServe(rest);
      }
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        console.log(USAGE);
        return 0;
      default:
        console.error(`tirl: unknown command '${command}'\n\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    if (error instanceof Error && (error as Error & { usage?: boolean }).usage) {
      console.error(error.message);
      return 2;
    }
    throw error;
  }
}
