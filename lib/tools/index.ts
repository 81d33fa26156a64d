export type { JsonSchema, Tool, ToolOutcome, ToolResponse, ToolStatus } from './types.js';
export { ToolRegistry, codeExecutionTool, type OpenAIToolSpec, type ToolCallRequest } from './registry.js';
export {
  CodeSandbox,
  JavaScriptSandbox,
  MAX_CODE_BYTES,
  PythonSandbox,
  SandboxUnavailableError,
  type JavaScriptSandboxOptions,
  type PythonSandboxOptions,
  type SandboxLanguage,
  type SandboxOptions,
  type SandboxResponse,
} from './sandbox.js';
export { SandboxSession } from './session.js';
