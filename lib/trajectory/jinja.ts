/**
 * A model's own chat template, the Jinja source from its `tokenizer_config.json`, rendered by
 * `@huggingface/jinja` (the Jinja engine of transformers.js). It renders whole conversations,
 * as a server does, and the spans an incremental token record appends one at a time.
 */
import { Template } from '@huggingface/jinja';
import type { OpenAIToolSpec } from '../tools/registry.js';
import { USER_FEEDBACK_TOOL, type TrajectoryChatMessage } from './chat.js';
import { checkArray, checkObject, checkString, typeError } from '../check.js';
import type { HuggingFaceTokenizer } from './hf_tokenizer.js';
import type { Action, ToolFeedback } from './model.js';
import type { ChatTemplate, TemplatePart } from './template.js';

/** Options of {@link JinjaChatTemplate}. */
export interface JinjaChatTemplateOptions {
  /** The template's Jinja source (`chat_template`). */
  source: string;
  /** Name of the template. Default "jinja". */
  name?: string;
  /** Tools shown to the model (OpenAI format, e.g. `registry.toOpenAITools()`); the template lays them out. */
  tools?: readonly OpenAIToolSpec[];
  /** Text of the token that ends an assistant turn (Qwen: `<|im_end|>`, Llama 3: `<|eot_id|>`). */
  endOfTurn: string;
  /** Texts of the special tokens, so rendered text splits into text and special parts. Default none. */
  specialTokens?: readonly string[];
  /** `bos_token` and `eos_token` as the template reads them. */
  bosToken?: string;
  eosToken?: string;
  /** More template variables, e.g. `{ enable_thinking: false }` for Qwen3. */
  variables?: Record<string, unknown>;
}

/** Options of {@link JinjaChatTemplate.renderConversation}. */
export interface RenderConversationOptions {
  /** Append the generation prompt of the next assistant turn (`add_generation_prompt`). Default false. */
  addGenerationPrompt?: boolean;
}

/** A chat template that can also render a whole conversation at once, as a server does. */
export interface ConversationTemplate extends ChatTemplate {
  renderConversation(messages: readonly TrajectoryChatMessage[], options?: RenderConversationOptions): string;
  /** Rendered text as template parts, special tokens apart. */
  toParts(text: string): TemplatePart[];
}

/** Content of the stand-in assistant turn the response spans are cut after. */
const MARK = 'tirl-span-mark-7f3a';

/**
 * A Jinja chat template. As a `ChatTemplate` it renders each span (prompt, action, response,
 * next generation prompt) the way the whole conversation renders it: the response span is
 * the text that follows a stand-in assistant turn's end-of-turn token, so an incremental
 * record can tokenise each piece once, when it is appended, as verl's multi-turn rollout does.
 */
export class JinjaChatTemplate implements ConversationTemplate {
  readonly name: string;
  readonly endOfTurn: string;
  readonly #template: Template;
  readonly #tools: readonly OpenAIToolSpec[] | undefined;
  readonly #variables: Record<string, unknown>;
  readonly #special: RegExp | null;

  /** @throws TypeError for a bad option; SyntaxError when the source is not a valid template. */
  constructor(options: JinjaChatTemplateOptions) {
    checkObject('options', options);
    this.#template = new Template(checkString('options.source', options.source));
    this.name = options.name === undefined ? 'jinja' : checkString('options.name', options.name);
    this.endOfTurn = checkString('options.endOfTurn', options.endOfTurn);
    if (this.endOfTurn === '') throw typeError('options.endOfTurn', 'a non-empty string', this.endOfTurn);
    if (options.tools !== undefined) checkArray('options.tools', options.tools);
    this.#tools = options.tools === undefined || options.tools.length === 0 ? undefined : options.tools;
    const variables: Record<string, unknown> = { ...(options.variables === undefined ? {} : checkObject('options.variables', options.variables)) };
    if (options.bosToken !== undefined) variables.bos_token = checkString('options.bosToken', options.bosToken);
    if (options.eosToken !== undefined) variables.eos_token = checkString('options.eosToken', options.eosToken);
    this.#variables = variables;
    const special = (options.specialTokens === undefined ? [] : checkArray('options.specialTokens', options.specialTokens))
      .map((token, i) => checkString(`options.specialTokens[${i}]`, token))
      .filter((token) => token !== '')
      .sort((a, b) => b.length - a.length);
    this.#special = special.length === 0 ? null : new RegExp(special.map(escapeRegExp).join('|'), 'g');
  }

  /**
   * The template of a Hugging Face tokenizer (its `chatTemplate`), with its special tokens,
   * BOS and EOS. `endOfTurn` defaults to the EOS token.
   * @throws TypeError when the tokenizer has no chat template or no end-of-turn token is known.
   */
  static fromTokenizer(
    tokenizer: HuggingFaceTokenizer,
    options: Omit<JinjaChatTemplateOptions, 'source' | 'endOfTurn'> & { endOfTurn?: string } = {},
  ): JinjaChatTemplate {
    if (tokenizer.chatTemplate === undefined) throw typeError('tokenizer.chatTemplate', 'a chat template', undefined);
    const endOfTurn = options.endOfTurn ?? tokenizer.eosToken;
    if (endOfTurn === undefined) throw typeError('options.endOfTurn', 'the text of the end-of-turn token', undefined);
    return new JinjaChatTemplate({
      name: tokenizer.name,
      specialTokens: Object.keys(tokenizer.specialTokens),
      ...(tokenizer.bosToken === undefined ? {} : { bosToken: tokenizer.bosToken }),
      ...(tokenizer.eosToken === undefined ? {} : { eosToken: tokenizer.eosToken }),
      ...options,
      source: tokenizer.chatTemplate,
      endOfTurn,
    });
  }

  /** Renders a whole conversation as text, as an OpenAI-compatible server does before tokenising. */
  renderConversation(messages: readonly TrajectoryChatMessage[], options: RenderConversationOptions = {}): string {
    checkArray('messages', messages);
    const context: Record<string, unknown> = {
      ...this.#variables,
      messages: messages.map(templateMessage),
      add_generation_prompt: options.addGenerationPrompt === true,
    };
    if (this.#tools !== undefined) context.tools = this.#tools;
    return this.#template.render(context);
  }

  /** Splits rendered text into text parts and special-token parts. */
  toParts(text: string): TemplatePart[] {
    const parts: TemplatePart[] = [];
    let at = 0;
    if (this.#special !== null) {
      for (const match of text.matchAll(this.#special)) {
        if (match.index > at) parts.push({ text: text.slice(at, match.index) });
        parts.push({ special: match[0] });
        at = match.index + match[0].length;
      }
    }
    if (at < text.length) parts.push({ text: text.slice(at) });
    return parts;
  }

  prompt(system: string | undefined, prompt: string): TemplatePart[] {
    const messages: TrajectoryChatMessage[] = [];
    if (system !== undefined) messages.push({ role: 'system', content: system });
    messages.push({ role: 'user', content: prompt });
    return this.toParts(this.renderConversation(messages, { addGenerationPrompt: true }));
  }

  /** The action as the template writes an assistant message, through its end-of-turn token. */
  action(action: Action): TemplatePart[] {
    const user: TrajectoryChatMessage = { role: 'user', content: 'x' };
    const prefix = this.renderConversation([user], { addGenerationPrompt: true });
    const full = this.renderConversation([user, assistantMessage(action.text, action.toolCall)]);
    const end = full.indexOf(this.endOfTurn, prefix.length);
    if (!full.startsWith(prefix) || end < 0) {
      throw new Error(`The chat template ${this.name} does not write an assistant turn after its generation prompt, ending with ${this.endOfTurn}`);
    }
    return this.toParts(full.slice(prefix.length, end + this.endOfTurn.length));
  }

  response(response: ToolFeedback): TemplatePart[] {
    const { full, start } = this.#afterTurn(response, false);
    return this.toParts(full.slice(start));
  }

  nextTurn(): TemplatePart[] {
    const response: ToolFeedback = { toolName: USER_FEEDBACK_TOOL, status: 'success', text: 'x' };
    const without = this.#afterTurn(response, false).full;
    const withPrompt = this.#afterTurn(response, true).full;
    if (!withPrompt.startsWith(without)) {
      throw new Error(`The chat template ${this.name} changes earlier text when it adds the generation prompt`);
    }
    return this.toParts(withPrompt.slice(without.length));
  }

  /** Renders a stand-in turn followed by `response`; `start` is where the response's span begins. */
  #afterTurn(response: ToolFeedback, addGenerationPrompt: boolean): { full: string; start: number } {
    const isTool = response.toolName !== USER_FEEDBACK_TOOL;
    const callId = response.toolCallId ?? 'call_0';
    const assistant = assistantMessage(MARK, isTool ? { id: callId, name: response.toolName, arguments: '{}' } : undefined);
    const reply: TrajectoryChatMessage = isTool
      ? { role: 'tool', content: response.text, name: response.toolName, tool_call_id: callId }
      : { role: 'user', content: response.text };
    const full = this.renderConversation([{ role: 'user', content: 'x' }, assistant, reply], { addGenerationPrompt });
    const mark = full.indexOf(MARK);
    const end = mark < 0 ? -1 : full.indexOf(this.endOfTurn, mark + MARK.length);
    if (end < 0) throw new Error(`The chat template ${this.name} does not end an assistant turn with ${this.endOfTurn}`);
    return { full, start: end + this.endOfTurn.length };
  }
}

function assistantMessage(text: string, call: Action['toolCall']): TrajectoryChatMessage {
  const message: TrajectoryChatMessage = { role: 'assistant', content: text };
  if (call !== undefined) {
    message.tool_calls = [{ id: call.id ?? 'call_0', type: 'function', function: { name: call.name, arguments: call.arguments } }];
  }
  return message;
}

/** The message as chat templates read it: the tirl `status` field left out, content never null. */
function templateMessage(message: TrajectoryChatMessage, index: number): Record<string, unknown> {
  checkObject(`messages[${index}]`, message);
  const out: Record<string, unknown> = { role: message.role, content: message.content ?? '' };
  if (message.name !== undefined) out.name = message.name;
  if (message.tool_calls !== undefined) out.tool_calls = message.tool_calls;
  if (message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id;
  return out;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
