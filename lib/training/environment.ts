/**
 * The environment an episode runs in: it poses a problem, receives the policy's actions as
 * text, runs the tools they call, feeds their output back, and says when the episode is
 * over and what it earned. Trainers create one environment per concurrent episode and
 * reuse it through {@link Environment.reset}.
 */

/** How a tool call ended. */
export type ToolStatus = 'success' | 'error' | 'timeout';

/** A tool an environment can run on the policy's behalf (a calculator, a code sandbox, a search). */
export interface Tool {
  /** Name the policy calls it by. */
  name: string;
  /** One-line description for prompts. */
  description: string;
  /** Runs the call; never throws on bad input (reports `error` instead). */
  run(input: string): Promise<{ status: ToolStatus; output: string }>;
}

/** What one action did. */
export interface StepResult {
  /** Text fed back to the policy before its next turn (a tool's output); '' for none. */
  feedback: string;
  /** The tool call this action made, if any, and how it ended. */
  tool?: { name: string; status: ToolStatus };
  /** Reward earned by this step; an episode's reward is the sum over its steps. */
  reward: number;
  /** Whether the episode is over (answered, or given up). */
  done: boolean;
  /** Whether the episode solved its problem; read when `done` (for success-rate metrics). */
  success?: boolean;
}

/**
 * One episode's world. For THOR step-level resampling a trainer replays an episode's
 * earlier actions on a fresh {@link Environment.reset}: an environment must then reach the
 * same state given the same actions (deterministic tools).
 */
export interface Environment<Problem> {
  /** Starts a new episode on `problem`; returns the prompt text the policy sees first. */
  reset(problem: Problem): Promise<string> | string;
  /** Applies the policy's action (running any tool it calls) and reports what followed. */
  step(action: string): Promise<StepResult> | StepResult;
  /** Releases what the environment holds (sandboxes, processes). Optional. */
  close?(): Promise<void> | void;
}
