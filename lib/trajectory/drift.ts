/**
 * Token drift: where re-rendering a whole conversation through its chat template gives other
 * tokens than the incremental record of what the policy saw and sampled. A trainer that
 * re-tokenises text trains on the re-rendered tokens; this check shows the difference first.
 */
import { Role } from '../kernels/index.js';
import { toChatMessages } from './chat.js';
import { checkObject, typeError } from '../check.js';
import type { ConversationTemplate } from './jinja.js';
import type { Trajectory } from './model.js';
import { encodeParts, renderTrajectory, type RoleCode } from './template.js';
import type { Tokenizer } from './tokenizer.js';

/** One region where the record and the re-rendering disagree. */
export interface TokenDrift {
  /** Index in the record where the region starts. */
  recordIndex: number;
  /** Index in the re-rendering where the region starts. */
  rerenderIndex: number;
  /** Turn of the record the region starts in (-1: the prompt). */
  turn: number;
  /** Role of the record's token there ('prompt', 'action' or 'feedback'). */
  role: 'prompt' | 'action' | 'feedback';
  /** The record's tokens of the region, and the re-rendering's. */
  recorded: number[];
  rerendered: number[];
  /** The same, decoded. */
  recordedText: string;
  rerenderedText: string;
}

/** What `checkTokenDrift` found. */
export interface TokenDriftReport {
  /** True when some region differs (the trailing text after the record's end does not count). */
  drifted: boolean;
  /** The differing regions, in order. */
  drifts: TokenDrift[];
  /** Tokens in the record, and in the re-rendered conversation. */
  recordLength: number;
  rerenderLength: number;
  /** Re-rendered tokens past the end of the record (a template's text after the last end-of-turn token). */
  trailing: number[];
  /** Whether the record is a whole token record; when false some span was itself rendered from text. */
  exact: boolean;
  /** Turns whose action ids were tokenised from text (`tokenSource` 'text'), not returned by the engine. */
  textTurns: number[];
}

/** Options of `checkTokenDrift`. */
export interface TokenDriftOptions {
  /** Tokens that must agree after a difference before the regions count as back in step. Default 4. */
  resync?: number;
  /** How far (tokens, each side) to look for the point where they are back in step. Default 512. */
  window?: number;
}

const ROLE_NAMES: Record<RoleCode, TokenDrift['role']> = {
  [Role.prompt]: 'prompt', [Role.action]: 'action', [Role.feedback]: 'feedback', [Role.padding]: 'feedback',
};

/**
 * Compares the trajectory's incremental token record (`renderTrajectory`) with the tokens of
 * the whole conversation rendered by `template` and tokenised by `tokenizer`, as a trainer
 * that re-tokenises would get them. Qwen3's template, for one, drops the thinking of
 * assistant turns before the last user message, so a multi-turn record drifts there.
 */
export function checkTokenDrift(
  trajectory: Trajectory,
  tokenizer: Tokenizer,
  template: ConversationTemplate,
  options: TokenDriftOptions = {},
): TokenDriftReport {
  checkObject('trajectory', trajectory);
  if (template === null || typeof template !== 'object' || typeof template.renderConversation !== 'function') {
    throw typeError('template', 'a conversation template (e.g. a JinjaChatTemplate)', template);
  }
  const resync = options.resync ?? 4;
  const window = options.window ?? 512;
  const record = renderTrajectory(trajectory, tokenizer, template);
  const rerendered = encodeParts(template.toParts(template.renderConversation(toChatMessages(trajectory))), tokenizer);
  const recorded = record.tokens;
  const turnOf = (index: number): number => {
    let turn = -1;
    while (turn + 1 < record.turnStarts.length && record.turnStarts[turn + 1]! <= index) turn++;
    return turn;
  };
  const drifts: TokenDrift[] = [];
  let i = 0;
  let j = 0;
  while (i < recorded.length && j < rerendered.length) {
    if (recorded[i] === rerendered[j]) { i++; j++; continue; }
    const [di, dj] = resyncPoint(recorded, rerendered, i, j, resync, window);
    const region = (ids: number[], from: number, to: number) => ids.slice(from, to);
    const a = region(recorded, i, di);
    const b = region(rerendered, j, dj);
    drifts.push({
      recordIndex: i, rerenderIndex: j, turn: turnOf(i), role: ROLE_NAMES[record.roles[Math.min(i, recorded.length - 1)]!],
      recorded: a, rerendered: b, recordedText: tokenizer.decode(a), rerenderedText: tokenizer.decode(b),
    });
    i = di;
    j = dj;
  }
  if (i < recorded.length) {
    const a = recorded.slice(i);
    drifts.push({
      recordIndex: i, rerenderIndex: j, turn: turnOf(i), role: ROLE_NAMES[record.roles[i]!],
      recorded: a, rerendered: [], recordedText: tokenizer.decode(a), rerenderedText: '',
    });
  }
  const textTurns: number[] = [];
  trajectory.turns.forEach((turn, t) => { if (turn.action.tokenSource === 'text') textTurns.push(t); });
  return {
    drifted: drifts.length > 0,
    drifts,
    recordLength: recorded.length,
    rerenderLength: rerendered.length,
    trailing: i === recorded.length ? rerendered.slice(j) : [],
    exact: record.exact,
    textTurns,
  };
}

/**
 * The first pair (i', j') past a difference at (i, j) where `resync` tokens agree, nearest by
 * i' + j'; the ends of both when there is none within `window`.
 */
function resyncPoint(a: readonly number[], b: readonly number[], i: number, j: number, resync: number, window: number): [number, number] {
  for (let total = 1; total <= 2 * window; total++) {
    for (let da = Math.max(0, total - window); da <= Math.min(total, window); da++) {
      const ia = i + da;
      const jb = j + total - da;
      if (ia >= a.length || jb >= b.length) continue;
      let k = 0;
      while (k < resync && ia + k < a.length && jb + k < b.length && a[ia + k] === b[jb + k]) k++;
      if (k === resync || (k > 0 && (ia + k === a.length || jb + k === b.length))) return [ia, jb];
    }
  }
  return [a.length, b.length];
}
