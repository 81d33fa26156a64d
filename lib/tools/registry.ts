import { JavaScriptSandbox, type CodeSandbox } from './sandbox.js';
import type { JsonSchema, Tool, ToolOutcome, ToolResponse } from './types.js';
import { checkNonEmptyString, checkObject, checkString, typeError } from '../check.js';

/** A tool as listed in an OpenAI chat-completions request's `tools` array. */
export interface OpenAIToolSpec {
  type: 'function';
  function: { name: string; description: string; parameters: JsonSchema };
}

/** A tool call as the model returns it (OpenAI wire format): arguments are a JSON string. */
export interface ToolCallRequest {
  id?: string;
  type?: 'function';
  function: { name: string; arguments: string };
}

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

function typeMatches(value: unknown, type: JsonSchema['type']): boolean {
  switch (type) {
    case undefined: return true;
    case 'string': return typeof value === 'string';
    case 'number': return typeof value === 'number' && Number.isFinite(value);
    case 'integer': return Number.isInteger(value);
    case 'boolean': return typeof value === 'boolean';
    case 'array': return Array.isArray(value);
    case 'null': return value === null;
    case 'object': return typeof value === 'object' && value !== null && !Array.isArray(value);
  }
}

/**
 * Why `args` do not fit `schema` (its `required` list, the `type` and `enum` of each
 * top-level property), or undefined when they do. Deeper JSON Schema keywords are left to
 * the tool.
 */
function argumentProblem(args: Record<string, unknown>, schema: JsonSchema): string | undefined {
  for (const name of schema.required ?? []) {
    if (!(name in args)) return `missing required argument "${name}"`;
  }
  for (const [name, value] of Object.entries(args)) {
    const property = schema.properties?.[name];
    if (property === undefined) continue;
    if (!typeMatches(value, property.type)) return `argument "${name}" must be of type ${property.type}`;
    if (property.enum !== undefined && !property.enum.includes(value)) {
      return `argument "${name}" must be one of ${JSON.stringify(property.enum)}`;
    }
  }
  return undefined;
}

/**
 * The tools an agent may call, by name. It lists them in the OpenAI `tools` wire format
 * for the policy, and turns a model's tool call into a {@link ToolResponse}: unknown tools,
 * unparsable or ill-typed arguments and tools that throw all become responses with status
 * 'error' (the model made the mistake, so it should read about it), never exceptions.
 */
export class ToolRegistry {
  readonly #tools = new Map<string, Tool<never>>();

  /**
   * Adds `tool`. Throws a TypeError when it is not a tool (name of 1–64 letters, digits,
   * `_` or `-`; a description; an object schema; a `call` function) and an Error when a
   * tool of that name is already registered. Returns this registry, for chaining.
   */
  register<Args>(tool: Tool<Args>): this {
    checkObject('tool', tool);
    const name = checkNonEmptyString('tool.name', tool.name);
    if (!TOOL_NAME.test(name)) throw typeError('tool.name', '1 to 64 of [A-Za-z0-9_-]', name);
    checkString('tool.description', tool.description);
    checkObject('tool.parameters', tool.parameters);
    if (typeof tool.call !== 'function') throw typeError('tool.call', 'a function', tool.call);
    if (this.#tools.has(name)) throw new Error(`A tool named "${name}" is already registered`);
    this.#tools.set(name, tool as Tool<never>);
    return this;
  }

  /** Whether a tool of that name is registered. */
  has(name: string): boolean {
    return this.#tools.has(name);
  }

  /** Names of the registered tools, in registration order. */
  get names(): string[] {
    return [...this.#tools.keys()];
  }

  /** The registered tools in the OpenAI chat-completions `tools` format. */
  toOpenAITools(): OpenAIToolSpec[] {
    return [...this.#tools.values()].map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description, parameters: tool.parameters },
    }));
  }

  /**
   * Calls tool `name` with `args`: an object, or the JSON text of one as models send it.
   * Resolves with the tool's response; problems of the call itself (unknown tool, bad
   * arguments, a tool that throws) resolve with status 'error' and a message for the model.
   */
  async call(name: string, args: unknown): Promise<ToolResponse> {
    checkString('name', name);
    const tool = this.#tools.get(name);
    if (tool === undefined) {
      return { tool: name, status: 'error', error: `Unknown tool "${name}"; available tools: ${this.names.join(', ') || 'none'}` };
    }
    let parsed = args;
    if (typeof args === 'string') {
      try {
        parsed = args.trim() === '' ? {} : JSON.parse(args);
      } catch (error) {
        return { tool: name, status: 'error', error: `Arguments are not valid JSON: ${(error as Error).message}` };
      }
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return { tool: name, status: 'error', error: 'Arguments must be a JSON object' };
    }
    const problem = argumentProblem(parsed as Record<string, unknown>, tool.parameters);
    if (problem !== undefined) return { tool: name, status: 'error', error: `Invalid arguments: ${problem}` };
    let outcome: ToolOutcome;
    try {
      outcome = await tool.call(parsed as never);
    } catch (error) {
      return { tool: name, status: 'error', error: error instanceof Error ? error.message : String(error) };
    }
    return { ...outcome, tool: name };
  }

  /** Calls the tool named in a model's tool call (OpenAI wire format). */
  callToolCall(toolCall: ToolCallRequest): Promise<ToolResponse> {
    checkObject('toolCall', toolCall);
    checkObject('toolCall.function', toolCall.function);
    return this.call(checkString('toolCall.function.name', toolCall.function.name), toolCall.function.arguments);
  }
}

/**
 * A tool that runs the model's `code` argument in `sandbox` and answers with what the
 * program printed. Default name 'python' or 'javascript' after the sandbox's language.
 */
export function codeExecutionTool(
  sandbox: CodeSandbox,
  options: { name?: string; description?: string } = {},
): Tool<{ code: string }> {
  checkObject('options', options);
  const language = sandbox instanceof JavaScriptSandbox
    ? `JavaScript (Node.js, ${sandbox.moduleType === 'module' ? 'ES module' : 'CommonJS'})`
    : 'Python 3';
  const name = options.name === undefined ? sandbox.language : checkNonEmptyString('options.name', options.name);
  const description = options.description === undefined
    ? `Runs a ${language} program in a sandbox without network access and returns what it prints. ` +
      'Print the values you need; only /tmp is writable and nothing persists between calls.'
    : checkString('options.description', options.description);
  return {
    name,
    description,
    parameters: {
      type: 'object',
      properties: { code: { type: 'string', description: `The ${language} program to run` } },
      required: ['code'],
    },
    async call({ code }) {
      const { status, result, error } = await sandbox.run(code);
      const outcome: ToolOutcome = { status };
      if (result !== undefined) outcome.result = result;
      if (error !== undefined) outcome.error = error;
      return outcome;
    },
  };
}
