/**
 * A Llama-architecture causal language model in TensorFlow.js, and its export as a GGUF file
 * llama.cpp runs: token embedding, per layer RMSNorm → rotary multi-head attention with a
 * causal mask → residual, RMSNorm → SwiGLU MLP → residual; a final RMSNorm and a tied or
 * untied LM head.
 *
 * The forward is the function llama.cpp computes for `general.architecture = "llama"`
 * (ggml-org/llama.cpp `src/models/llama.cpp` and `src/llama-model.cpp`, commit
 * 00ad355e009e83abf98f96a6ded7193b95763681): RMSNorm x / sqrt(mean(x²) + eps) · w; rotary
 * embedding of type LLAMA_ROPE_TYPE_NORM, which rotates ADJACENT pairs (x[2i], x[2i+1]) of each
 * head by pos · base^(-2i / headDim) (our weights are written in that convention, so unlike a
 * Hugging Face checkpoint they need no Q/K permutation); attention scores scaled by
 * 1/sqrt(headDim); MLP down(silu(gate(x)) · up(x)). Weights are stored `[in, out]` here (x·W)
 * and written as ggml's `[out, in]` rows.
 *
 * Token inputs go through a one-hot matmul, not `gather`, so gradients work on the cpu and
 * wasm backends alike.
 */
import * as tf from '@tensorflow/tfjs';

import { checkFiniteNumber, checkPositiveInteger, rangeError } from '../check.js';
import { writeGguf, type GgufTensor, type GgufTensorType, type GgufValue } from '../gguf/gguf.js';

/** The shape of a {@link LlamaModel}. */
export interface LlamaConfig {
  vocabSize: number;
  /** Model width (`llama.embedding_length`). */
  dModel: number;
  /** Transformer blocks (`llama.block_count`). */
  layers: number;
  /** Attention heads (query and key/value heads alike); must divide `dModel` into an even head size. */
  heads: number;
  /** MLP hidden width (`llama.feed_forward_length`). */
  ffnHidden: number;
  /** Longest sequence (`llama.context_length`). */
  contextLength: number;
  /** Rotary base (`llama.rope.freq_base`). Default 10000. */
  ropeBase?: number;
  /** RMSNorm epsilon (`llama.attention.layer_norm_rms_epsilon`). Default 1e-5. */
  rmsEpsilon?: number;
  /** The LM head is the embedding matrix (no `output.weight` in the GGUF). Default false. */
  tiedEmbeddings?: boolean;
}

/** The tokenizer metadata of a GGUF export. */
export interface LlamaGgufVocabulary {
  /** Token strings by id (`tokenizer.ggml.tokens`), all distinct, one per vocabulary entry. */
  tokens: readonly string[];
  /** Begin-of-sequence and end-of-sequence ids. */
  bos: number;
  eos: number;
  /** Padding id. */
  pad: number;
}

interface Block {
  attnNorm: tf.Variable;
  wq: tf.Variable;
  wk: tf.Variable;
  wv: tf.Variable;
  wo: tf.Variable;
  ffnNorm: tf.Variable;
  gate: tf.Variable;
  up: tf.Variable;
  down: tf.Variable;
}

let instances = 0;

/** A Llama model's parameters as tfjs variables and its forward. */
export class LlamaModel {
  readonly config: Required<LlamaConfig>;
  readonly embedding: tf.Variable;
  readonly blocks: Block[];
  readonly outputNorm: tf.Variable;
  /** `[dModel, vocab]`; absent with tied embeddings. */
  readonly output: tf.Variable | undefined;
  private readonly headDim: number;
  /** The pair swap of the rotary embedding, `[headDim, headDim]`: (a, b) -> (-b, a). */
  private readonly rotate: tf.Tensor2D;

  /**
   * @param random uniform numbers in [0, 1) for the initial weights (e.g. a seeded generator's `next`).
   * @throws TypeError / RangeError naming the config field that is out of range.
   */
  constructor(config: LlamaConfig, random: () => number) {
    for (const key of ['vocabSize', 'dModel', 'layers', 'heads', 'ffnHidden', 'contextLength'] as const) {
      checkPositiveInteger(`config.${key}`, config[key]);
    }
    const headDim = config.dModel / config.heads;
    if (!Number.isInteger(headDim) || headDim % 2 !== 0) {
      throw rangeError('config.heads', `a divisor of dModel ${config.dModel} into an even head size`, config.heads);
    }
    this.config = {
      ...config,
      ropeBase: checkFiniteNumber('config.ropeBase', config.ropeBase ?? 10000),
      rmsEpsilon: checkFiniteNumber('config.rmsEpsilon', config.rmsEpsilon ?? 1e-5),
      tiedEmbeddings: config.tiedEmbeddings ?? false,
    };
    this.headDim = headDim;
    const { vocabSize: v, dModel: d, ffnHidden: f } = config;
    // tfjs variable names are global: each model gets its own prefix.
    const prefix = `llama${instances++}`;
    const matrix = (rows: number, cols: number, scale: number, name: string) => {
      const values = new Float32Array(rows * cols);
      for (let i = 0; i < values.length; i++) values[i] = (random() * 2 - 1) * scale * Math.sqrt(3);
      return tf.variable(tf.tensor2d(values, [rows, cols]), true, `${prefix}/${name}`);
    };
    const ones = (n: number, name: string) => tf.variable(tf.ones([n]), true, `${prefix}/${name}`);
    this.embedding = matrix(v, d, 1 / Math.sqrt(d), 'token_embd');
    this.blocks = Array.from({ length: config.layers }, (_, l) => ({
      attnNorm: ones(d, `blk.${l}.attn_norm`),
      wq: matrix(d, d, 1 / Math.sqrt(d), `blk.${l}.attn_q`),
      wk: matrix(d, d, 1 / Math.sqrt(d), `blk.${l}.attn_k`),
      wv: matrix(d, d, 1 / Math.sqrt(d), `blk.${l}.attn_v`),
      wo: matrix(d, d, 1 / Math.sqrt(d * 2 * config.layers), `blk.${l}.attn_output`),
      ffnNorm: ones(d, `blk.${l}.ffn_norm`),
      gate: matrix(d, f, 1 / Math.sqrt(d), `blk.${l}.ffn_gate`),
      up: matrix(d, f, 1 / Math.sqrt(d), `blk.${l}.ffn_up`),
      down: matrix(f, d, 1 / Math.sqrt(f * 2 * config.layers), `blk.${l}.ffn_down`),
    }));
    this.outputNorm = ones(d, 'output_norm');
    this.output = this.config.tiedEmbeddings ? undefined : matrix(d, v, 1 / Math.sqrt(d), 'output');
    const swap = new Float32Array(headDim * headDim);
    for (let i = 0; i < headDim; i += 2) {
      swap[i * headDim + (i + 1)] = 1; // out[2i+1] += x[2i]
      swap[(i + 1) * headDim + i] = -1; // out[2i] -= x[2i+1]
    }
    this.rotate = tf.keep(tf.tensor2d(swap, [headDim, headDim]));
  }

  /** Every trainable parameter, embedding first. */
  get variables(): tf.Variable[] {
    const blocks = this.blocks.flatMap((b) => [b.attnNorm, b.wq, b.wk, b.wv, b.wo, b.ffnNorm, b.gate, b.up, b.down]);
    return [this.embedding, ...blocks, this.outputNorm, ...(this.output ? [this.output] : [])];
  }

  private rmsNorm(x: tf.Tensor2D, weight: tf.Variable): tf.Tensor2D {
    const meanSquare = tf.mean(tf.square(x), -1, true);
    return tf.mul(tf.mul(x, tf.rsqrt(tf.add(meanSquare, this.config.rmsEpsilon))), weight) as tf.Tensor2D;
  }

  /** cos and sin of every (position, pair), repeated over the pair's two elements, `[T, headDim]`. */
  private rotaryTables(steps: number): { cos: tf.Tensor2D; sin: tf.Tensor2D } {
    const hd = this.headDim;
    const cos = new Float32Array(steps * hd);
    const sin = new Float32Array(steps * hd);
    for (let p = 0; p < steps; p++) {
      for (let i = 0; i < hd / 2; i++) {
        // ggml computes theta in float: theta_scale = base^(-2/hd), theta_i = p * theta_scale^i.
        const theta = p * Math.pow(this.config.ropeBase, (-2 * i) / hd);
        cos[p * hd + 2 * i] = cos[p * hd + 2 * i + 1] = Math.cos(theta);
        sin[p * hd + 2 * i] = sin[p * hd + 2 * i + 1] = Math.sin(theta);
      }
    }
    return { cos: tf.tensor2d(cos, [steps, hd]), sin: tf.tensor2d(sin, [steps, hd]) };
  }

  /** Rotary embedding of `[B*T*H, hd]` rows laid out (b, t, h): x·cos + swap(x)·sin. */
  private rope(x: tf.Tensor2D, batch: number, steps: number, cos: tf.Tensor2D, sin: tf.Tensor2D): tf.Tensor2D {
    const { heads } = this.config;
    const hd = this.headDim;
    const shaped = (t: tf.Tensor) => t.reshape([batch, steps, heads, hd]);
    const c = cos.reshape([1, steps, 1, hd]);
    const s = sin.reshape([1, steps, 1, hd]);
    const rotated = tf.add(tf.mul(shaped(x), c), tf.mul(shaped(tf.matMul(x, this.rotate)), s));
    return rotated.reshape([-1, hd]) as tf.Tensor2D;
  }

  /**
   * Teacher-forced logits of a padded batch of token ids `[B, T]` int32: entry [b, t] holds the
   * next-token logits after reading tokens 0..t of sequence b (positions count from 0), `[B, T, V]`.
   */
  logits(tokens: tf.Tensor2D): tf.Tensor3D {
    const [batch, steps] = tokens.shape;
    const { dModel: d, heads, vocabSize: v } = this.config;
    const hd = this.headDim;
    if (steps > this.config.contextLength) throw rangeError('tokens.shape[1]', `at most contextLength ${this.config.contextLength}`, steps);
    const { cos, sin } = this.rotaryTables(steps);
    const causal = tf.tensor2d(
      Float32Array.from({ length: steps * steps }, (_, k) => (k % steps > Math.floor(k / steps) ? -1e9 : 0)),
      [steps, steps],
    );
    const oneHot = tf.oneHot(tokens.reshape([-1]) as tf.Tensor1D, v).toFloat() as tf.Tensor2D;
    let x = tf.matMul(oneHot, this.embedding) as tf.Tensor2D; // [B*T, d]
    const toHeads = (t: tf.Tensor2D) => t.reshape([batch, steps, heads, hd]).transpose([0, 2, 1, 3]).reshape([batch * heads, steps, hd]) as tf.Tensor3D;
    for (const block of this.blocks) {
      const normed = this.rmsNorm(x, block.attnNorm);
      const q = this.rope(tf.matMul(normed, block.wq).reshape([-1, hd]) as tf.Tensor2D, batch, steps, cos, sin);
      const k = this.rope(tf.matMul(normed, block.wk).reshape([-1, hd]) as tf.Tensor2D, batch, steps, cos, sin);
      const vv = tf.matMul(normed, block.wv) as tf.Tensor2D;
      const scores = tf.add(tf.mul(tf.matMul(toHeads(q.reshape([-1, d]) as tf.Tensor2D), toHeads(k.reshape([-1, d]) as tf.Tensor2D), false, true), 1 / Math.sqrt(hd)), causal);
      const attended = tf.matMul(tf.softmax(scores), toHeads(vv)); // [B*H, T, hd]
      const merged = attended.reshape([batch, heads, steps, hd]).transpose([0, 2, 1, 3]).reshape([batch * steps, d]) as tf.Tensor2D;
      x = tf.add(x, tf.matMul(merged, block.wo)) as tf.Tensor2D;
      const normed2 = this.rmsNorm(x, block.ffnNorm);
      const gate = tf.matMul(normed2, block.gate);
      const hidden = tf.mul(tf.mul(gate, tf.sigmoid(gate)), tf.matMul(normed2, block.up)) as tf.Tensor2D;
      x = tf.add(x, tf.matMul(hidden, block.down)) as tf.Tensor2D;
    }
    const final = this.rmsNorm(x, this.outputNorm);
    const logits = this.output ? tf.matMul(final, this.output) : tf.matMul(final, this.embedding, false, true);
    return logits.reshape([batch, steps, v]);
  }

  /** The GGUF metadata llama.cpp's loader reads for this model (`llama.*`, `tokenizer.ggml.*`). */
  ggufMetadata(vocabulary: LlamaGgufVocabulary, name = 'tirl-llama'): Map<string, GgufValue> {
    const c = this.config;
    if (vocabulary.tokens.length !== c.vocabSize) throw rangeError('vocabulary.tokens.length', `the model's vocabSize ${c.vocabSize}`, vocabulary.tokens.length);
    vocabulary.tokens.forEach((token, i) => {
      if (typeof token !== 'string' || !/^[!-~]+$/.test(token)) throw rangeError(`vocabulary.tokens[${i}]`, 'printable ASCII without spaces', token);
    });
    if (new Set(vocabulary.tokens).size !== vocabulary.tokens.length) throw rangeError('vocabulary.tokens', 'distinct strings', 'duplicates');
    for (const key of ['bos', 'eos', 'pad'] as const) {
      if (!Number.isInteger(vocabulary[key]) || vocabulary[key] < 0 || vocabulary[key] >= c.vocabSize) {
        throw rangeError(`vocabulary.${key}`, `a token id in [0, ${c.vocabSize})`, vocabulary[key]);
      }
    }
    const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
    return new Map<string, GgufValue>([
      ['general.architecture', { type: 'string', value: 'llama' }],
      ['general.name', { type: 'string', value: name }],
      ['general.file_type', u32(0)], // overwritten by toGguf for f16
      ['llama.vocab_size', u32(c.vocabSize)],
      ['llama.context_length', u32(c.contextLength)],
      ['llama.embedding_length', u32(c.dModel)],
      ['llama.block_count', u32(c.layers)],
      ['llama.feed_forward_length', u32(c.ffnHidden)],
      ['llama.attention.head_count', u32(c.heads)],
      ['llama.attention.head_count_kv', u32(c.heads)],
      ['llama.rope.dimension_count', u32(this.headDim)],
      ['llama.rope.freq_base', { type: 'float32', value: c.ropeBase }],
      ['llama.attention.layer_norm_rms_epsilon', { type: 'float32', value: c.rmsEpsilon }],
      // A byte-level BPE ("gpt2") vocabulary of the model's own token strings and no merges.
      // Ids go in and out, so nothing is meant to be tokenised with it; but node-llama-cpp
      // tokenises a few strings when it loads a model, and llama.cpp's BPE tokenizer drops a
      // piece it cannot find, where the SentencePiece ("llama") one falls back to byte tokens
      // <0x00>..<0xFF> and aborts the process without them. "none" leaves the vocabulary
      // without token texts. Printable ASCII token texts detokenise as themselves.
      ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
      ['tokenizer.ggml.pre', { type: 'string', value: 'default' }],
      ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: vocabulary.tokens }],
      ['tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: [] }],
      // 1 = LLAMA_TOKEN_TYPE_NORMAL: every id is an ordinary piece (detokenised as its text).
      ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: vocabulary.tokens.map(() => 1) }],
      ['tokenizer.ggml.bos_token_id', u32(vocabulary.bos)],
      ['tokenizer.ggml.eos_token_id', u32(vocabulary.eos)],
      ['tokenizer.ggml.padding_token_id', u32(vocabulary.pad)],
      ['tokenizer.ggml.add_bos_token', { type: 'bool', value: false }],
      ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }],
    ]);
  }

  /**
   * The model as a GGUF file: matrices in `type` (f32 or f16), norms in f32 (llama.cpp's
   * converters keep 1-D tensors f32 too).
   */
  async toGguf(vocabulary: LlamaGgufVocabulary, type: GgufTensorType = 'f32'): Promise<Uint8Array> {
    const metadata = this.ggufMetadata(vocabulary);
    metadata.set('general.file_type', { type: 'uint32', value: type === 'f16' ? 1 : 0 }); // LLAMA_FTYPE_ALL_F32 / MOSTLY_F16
    const tensors: GgufTensor[] = [];
    const vector = async (name: string, v: tf.Variable) => tensors.push({ name, shape: [v.shape[0]!], type: 'f32', data: (await v.data()) as Float32Array });
    // [in, out] here -> ggml rows of length `in` (ne = [in, out]): the [out, in] transpose.
    const linear = async (name: string, w: tf.Variable) => {
      const [rows, cols] = w.shape as [number, number];
      const t = tf.tidy(() => tf.transpose(w));
      tensors.push({ name, shape: [cols, rows], type, data: (await t.data()) as Float32Array });
      t.dispose();
    };
    tensors.push({ name: 'token_embd.weight', shape: [...this.embedding.shape], type, data: (await this.embedding.data()) as Float32Array });
    for (const [l, b] of this.blocks.entries()) {
      await vector(`blk.${l}.attn_norm.weight`, b.attnNorm);
      await linear(`blk.${l}.attn_q.weight`, b.wq);
      await linear(`blk.${l}.attn_k.weight`, b.wk);
      await linear(`blk.${l}.attn_v.weight`, b.wv);
      await linear(`blk.${l}.attn_output.weight`, b.wo);
      await vector(`blk.${l}.ffn_norm.weight`, b.ffnNorm);
      await linear(`blk.${l}.ffn_gate.weight`, b.gate);
      await linear(`blk.${l}.ffn_up.weight`, b.up);
      await linear(`blk.${l}.ffn_down.weight`, b.down);
    }
    await vector('output_norm.weight', this.outputNorm);
    if (this.output) await linear('output.weight', this.output);
    return writeGguf(metadata, tensors);
  }

  /** Releases the model's tensors. */
  dispose(): void {
    for (const v of this.variables) v.dispose();
    this.rotate.dispose();
  }
}
