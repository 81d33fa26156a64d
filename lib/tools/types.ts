/** How a tool call ended. */
export type ToolStatus = 'success' | 'error' | 'timeout';

/**
 * What a tool call returns to the agent: `result` is what the tool produced (for code
 * execution, what the program printed on stdout); `error` says what went wrong (for code
 * execution, what the program wrote on stderr, e.g. a traceback, and how it ended).
 */
export interface ToolResponse {
  /** Name of the tool that was called. */
  tool: string;
  status: ToolStatus;
  result?: string;
  error?: string;
}

/** A tool's outcome before the registry stamps the tool's name on it. */
export type ToolOutcome = Omit<ToolResponse, 'tool'>;

/** The subset of JSON Schema used to describe a tool's arguments (an object schema). */
export interface JsonSchema {
  type?: 'object' | 'string' | 'number' | 'integer' | 'boolean' | 'array' | 'null';
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
  [keyword: string]: unknown;
}

/**
 * A typed tool. `parameters` is the JSON Schema of `Args` as sent to the model in the
 * OpenAI `tools` list; the registry checks calls against its `required` list and the
 * `type` of each top-level property before `call` runs.
 */
export interface Tool<Args = Record<string, unknown>> {
  readonly name: string;
  readonly description: string;
  readonly parameters: JsonSchema;
  /** Runs the tool. A thrown error becomes a response with status 'error'. */
  call(args: Args): Promise<ToolOutcome>;
}
