/**
 * Retrieval from a local corpus for the decomposer–solver: BM25 ranking (MiniSearch's
 * BM25+, an in-memory index with no network and no native code).
 */
import MiniSearch from 'minisearch';
import { checkArray, checkNonNegativeInteger, checkObject, checkString, rangeError, typeError } from '../check.js';

/** A passage of a corpus. */
export interface CorpusDocument {
  /** Unique id. */
  id: string;
  title: string;
  text: string;
}

/** A passage found for a query, with its relevance score (higher is better; comparable within one query only). */
export interface RetrievedDocument extends CorpusDocument {
  score: number;
}

/** Finds the passages most relevant to a query. */
export interface Retriever {
  /** At most `limit` documents, best first. */
  search(query: string, limit: number): RetrievedDocument[] | Promise<RetrievedDocument[]>;
}

/** Options of {@link Bm25Retriever}. */
export interface Bm25RetrieverOptions {
  /** Term-frequency saturation k1 (> 0). Default 1.2. */
  k1?: number;
  /** Length normalisation b, in [0, 1]. Default 0.75. */
  b?: number;
  /** BM25+ lower bound δ on a matching term's contribution (≥ 0; 0 is plain BM25). Default 0.5. */
  delta?: number;
  /** Weight of a title match relative to a text match (> 0). Default 2. */
  titleBoost?: number;
}

/**
 * Words too common to carry meaning: without them a query like "Who was the wife of #1"
 * ranks passages by its content words only.
 */
const STOP_WORDS = new Set([
  'a', 'an', 'and', 'are', 'as', 'at', 'be', 'by', 'did', 'does', 'do', 'for', 'from', 'had', 'has', 'have', 'he',
  'her', 'his', 'how', 'in', 'into', 'is', 'it', 'its', 'of', 'on', 'or', 's', 'she', 'that', 'the', 'their', 'there',
  'this', 'to', 'was', 'were', 'what', 'when', 'where', 'which', 'who', 'whom', 'whose', 'why', 'with',
]);

function processTerm(term: string): string | null {
  const lower = term.toLowerCase();
  return STOP_WORDS.has(lower) ? null : lower;
}

function positiveNumber(name: string, value: unknown, fallback: number, allowZero: boolean, max = Infinity): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number') throw typeError(name, 'a number', value);
  if (!Number.isFinite(value) || value > max || (allowZero ? value < 0 : value <= 0)) {
    throw rangeError(name, `a finite number ${allowZero ? '≥' : '>'} 0${max === Infinity ? '' : ` and ≤ ${max}`}`, value);
  }
  return value;
}

/**
 * BM25 search over documents held in memory. Titles and texts are indexed as two fields,
 * lowercased, split at spaces and punctuation, without stop words; a query matches a
 * document that shares any term with it. Ties keep the corpus order, so results are
 * deterministic.
 */
export class Bm25Retriever implements Retriever {
  readonly #index: MiniSearch<CorpusDocument>;
  readonly #documents: Map<string, { document: CorpusDocument; position: number }>;
  readonly #titleBoost: number;
  readonly #bm25: { k: number; b: number; d: number };

  /**
   * Indexes `documents` (copied).
   * @throws TypeError for a malformed document, RangeError for a duplicate id or a bad option.
   */
  constructor(documents: readonly CorpusDocument[], options: Bm25RetrieverOptions = {}) {
    checkArray('documents', documents);
    checkObject('options', options);
    this.#bm25 = {
      k: positiveNumber('options.k1', options.k1, 1.2, false),
      b: positiveNumber('options.b', options.b, 0.75, true, 1),
      d: positiveNumber('options.delta', options.delta, 0.5, true),
    };
    this.#titleBoost = positiveNumber('options.titleBoost', options.titleBoost, 2, false);
    this.#documents = new Map();
    const copies = documents.map((value, i) => {
      const raw = checkObject(`documents[${i}]`, value);
      const document: CorpusDocument = {
        id: checkString(`documents[${i}].id`, raw.id),
        title: checkString(`documents[${i}].title`, raw.title),
        text: checkString(`documents[${i}].text`, raw.text),
      };
      if (this.#documents.has(document.id)) throw rangeError(`documents[${i}].id`, 'an id not used by an earlier document', document.id);
      this.#documents.set(document.id, { document, position: i });
      return document;
    });
    this.#index = new MiniSearch<CorpusDocument>({ fields: ['title', 'text'], processTerm });
    this.#index.addAll(copies);
  }

  /** Number of documents indexed. */
  get size(): number {
    return this.#documents.size;
  }

  /**
   * The `limit` best documents for `query` (fewer when fewer share a term with it), best
   * first, each a copy with its BM25 score.
   * @throws TypeError when `query` is not a string, RangeError when `limit` is not a non-negative integer.
   */
  search(query: string, limit: number): RetrievedDocument[] {
    checkString('query', query);
    checkNonNegativeInteger('limit', limit);
    if (limit === 0) return [];
    const results = this.#index.search(query, { boost: { title: this.#titleBoost }, bm25: this.#bm25, prefix: false, fuzzy: false });
    return results
      .map((result) => ({ entry: this.#documents.get(result.id as string)!, score: result.score }))
      .sort((a, b) => b.score - a.score || a.entry.position - b.entry.position)
      .slice(0, limit)
      .map(({ entry, score }) => ({ ...entry.document, score }));
  }
}
