/**
 * Chat templates: render a trajectory into token spans, each token tagged with its role.
 * The role codes are the kernel contract (`Role` of feedbackMask): 0 prompt, 1 action,
 * 2 feedback, 3 padding.
 */
import { Role } from '../kernels/index.js';
import type { Action, ToolFeedback, Trajectory } from './model.js';
import type { Tokenizer } from './tokenizer.js';
import { checkObject, rangeError, typeError } from '../check.js';

/** A token role code (see `Role`). */
export type RoleCode = (typeof Role)[keyof typeof Role];

/** A piece of rendered text: ordinary text, or a special token named by its text. */
export type TemplatePart = { text: string } | { special: string };

/** How a conversation is laid out as text and special tokens. */
export interface ChatTemplate {
  readonly name: string;
  /** System message, user prompt and the generation prompt of the first assistant turn. */
  prompt(system: string | undefined, prompt: string): TemplatePart[];
  /** The model's action when its sampled token ids are unknown, ending with its end-of-turn token. */
  action(action: Action): TemplatePart[];
  /** The tool's response, as the model reads it after its turn ends. */
  response(response: ToolFeedback): TemplatePart[];
  /** Glue between the end of a turn (and its response) and the next action: the next generation prompt. */
  nextTurn(): TemplatePart[];
}

/**
 * ChatML in the layout of Qwen2.5 chat models (the models SimpleTIR, THOR and AlphaApollo
 * train): tool calls as `<tool_call>{json}</tool_call>`, tool output as a user message
 * wrapped in `<tool_response>` tags.
 */
export const chatmlTemplate: ChatTemplate = Object.freeze({
  name: 'chatml',
  prompt(system: string | undefined, prompt: string): TemplatePart[] {
    const parts: TemplatePart[] = [];
    if (system !== undefined) parts.push({ special: '<|im_start|>' }, { text: `system\n${system}` }, { special: '<|im_end|>' }, { text: '\n' });
    parts.push({ special: '<|im_start|>' }, { text: `user\n${prompt}` }, { special: '<|im_end|>' }, { text: '\n' });
    parts.push({ special: '<|im_start|>' }, { text: 'assistant\n' });
    return parts;
  },
  action(action: Action): TemplatePart[] {
    let text = action.text;
    if (action.toolCall !== undefined) {
      let args: unknown = action.toolCall.arguments;
      try {
        args = JSON.parse(action.toolCall.arguments);
      } catch {
        // Arguments that are not JSON (code, free text) are embedded as a string.
      }
      text += `${text === '' ? '' : '\n'}<tool_call>\n${JSON.stringify({ name: action.toolCall.name, arguments: args })}\n</tool_call>`;
    }
    return [{ text }, { special: '<|im_end|>' }];
  },
  response(response: ToolFeedback): TemplatePart[] {
    return [
      { text: '\n' }, { special: '<|im_start|>' },
      { text: `user\n<tool_response>\n${response.text}\n</tool_response>` }, { special: '<|im_end|>' },
    ];
  },
  nextTurn(): TemplatePart[] {
    return [{ text: '\n' }, { special: '<|im_start|>' }, { text: 'assistant\n' }];
  },
});

/** A trajectory rendered to tokens. Turn positions are token indices into `tokens`, end exclusive. */
export interface RenderedTrajectory {
  tokens: number[];
  roles: RoleCode[];
  /** Behaviour log-probs: the action's `logprobs` where known, otherwise 0. */
  logprobs: number[];
  /** Where each turn's action starts. */
  turnStarts: number[];
  /** Where each turn's action ends (its feedback, if any, starts here). */
  turnActionEnds: number[];
  /** Where each turn ends (its feedback and the next generation prompt included). */
  turnEnds: number[];
  /**
   * True when every span came from the trajectory's token record (`promptTokenIds`, each
   * action's `tokenIds` with `tokenSource` other than 'text', the `feedbackTokenIds` of every
   * turn that another follows), so nothing was re-tokenised; false when the template rendered
   * such a span from text. The last turn's response, which no action read, may be rendered.
   */
  exact: boolean;
}

/** Token ids of template parts: special parts by their id, text parts through `encode`. */
export function encodeParts(parts: readonly TemplatePart[], tokenizer: Tokenizer): number[] {
  const ids: number[] = [];
  for (const part of parts) {
    if ('special' in part) ids.push(tokenizer.specialTokenId(part.special));
    else for (const id of tokenizer.encode(part.text)) ids.push(id);
  }
  return ids;
}

/**
 * Renders a trajectory with a template: prompt tokens (role 0), then per turn the action
 * (role 1) and the response plus the next generation prompt (role 2). Each span recorded in
 * the trajectory (`promptTokenIds`, `action.tokenIds`, `feedbackTokenIds`) is used verbatim,
 * so roles come from the record and nothing recorded is re-tokenised; only spans without a
 * record are rendered by the template from their text (`exact` says whether any was).
 * @param template default `chatmlTemplate`.
 */
export function renderTrajectory(trajectory: Trajectory, tokenizer: Tokenizer, template: ChatTemplate = chatmlTemplate): RenderedTrajectory {
  checkObject('trajectory', trajectory);
  if (tokenizer === null || typeof tokenizer !== 'object' || typeof tokenizer.encode !== 'function') {
    throw typeError('tokenizer', 'a Tokenizer', tokenizer);
  }
  const rendered: RenderedTrajectory = { tokens: [], roles: [], logprobs: [], turnStarts: [], turnActionEnds: [], turnEnds: [], exact: true };
  const append = (ids: readonly number[], role: RoleCode, logprobs?: readonly number[]) => {
    for (let i = 0; i < ids.length; i++) {
      rendered.tokens.push(ids[i]!);
      rendered.roles.push(role);
      rendered.logprobs.push(logprobs === undefined ? 0 : logprobs[i]!);
    }
  };
  if (trajectory.promptTokenIds !== undefined) {
    append(trajectory.promptTokenIds, Role.prompt);
  } else {
    append(encodeParts(template.prompt(trajectory.system, trajectory.prompt), tokenizer), Role.prompt);
    rendered.exact = false;
  }
  const turns = trajectory.turns;
  for (let t = 0; t < turns.length; t++) {
    const { action, response, feedbackTokenIds } = turns[t]!;
    rendered.turnStarts.push(rendered.tokens.length);
    if (action.tokenIds !== undefined) {
      if (action.logprobs !== undefined && action.logprobs.length !== action.tokenIds.length) {
        throw rangeError(`trajectory.turns[${t}].action.logprobs`, `${action.tokenIds.length} log-probs`, action.logprobs);
      }
      append(action.tokenIds, Role.action, action.logprobs);
      if (action.tokenSource === 'text') rendered.exact = false;
    } else {
      append(encodeParts(template.action(action), tokenizer), Role.action);
      rendered.exact = false;
    }
    rendered.turnActionEnds.push(rendered.tokens.length);
    if (feedbackTokenIds !== undefined) {
      append(feedbackTokenIds, Role.feedback);
    } else {
      if (response !== undefined) append(encodeParts(template.response(response), tokenizer), Role.feedback);
      if (t + 1 < turns.length) append(encodeParts(template.nextTurn(), tokenizer), Role.feedback);
      // A last response that no action follows cannot shift a trained token; it leaves `exact` as it is.
      if (t + 1 < turns.length) rendered.exact = false;
    }
    rendered.turnEnds.push(rendered.tokens.length);
  }
  return rendered;
}
