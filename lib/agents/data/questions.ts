/**
 * Multi-hop questions about the built-in corpus, each with its gold answers and a reference
 * decomposition: sub-questions that refer to earlier answers as `#k`, each answered by one
 * passage of `BUILTIN_CORPUS`.
 */

/** One step of a reference decomposition. */
export interface ReferenceStep {
  /** The sub-question; `#k` stands for the answer of step k (1-based). */
  question: string;
  /** Its answer. */
  answer: string;
  /** Id of the corpus passage that answers it. */
  supportingId: string;
}

/** A multi-hop question with gold answers (any of them is correct) and a reference decomposition. */
export interface MultiHopQuestion {
  id: string;
  question: string;
  /** Gold answers; the first is the canonical form. */
  answers: readonly string[];
  steps: readonly ReferenceStep[];
}

/** The built-in question set: 13 questions of two or three hops. */
export const BUILTIN_QUESTIONS: readonly MultiHopQuestion[] = Object.freeze([
  {
    id: 'q01', question: 'In which country was the author of The Glass Orchard born?', answers: ['Valdoria'],
    steps: [
      { question: 'Who wrote the novel The Glass Orchard?', answer: 'Ilsa Marrow', supportingId: 'glass-orchard-novel' },
      { question: 'In which town was #1 born?', answer: 'Quillmoor', supportingId: 'ilsa-marrow' },
      { question: 'In which country is the town #2?', answer: 'Valdoria', supportingId: 'quillmoor' },
    ],
  },
  {
    id: 'q02', question: "Who directed the film adaptation of the novel written by Teodor Vance's wife?", answers: ['Sabine Roe'],
    steps: [
      { question: 'Who was the wife of the composer Teodor Vance?', answer: 'Ilsa Marrow', supportingId: 'teodor-vance' },
      { question: 'What is the best-known novel of #1?', answer: 'The Glass Orchard', supportingId: 'ilsa-marrow' },
      { question: 'Who directed the film #2?', answer: 'Sabine Roe', supportingId: 'glass-orchard-film' },
    ],
  },
  {
    id: 'q03', question: 'Which river flows through the birthplace of the director of Harbour of Bells?', answers: ['River Tolle', 'Tolle'],
    steps: [
      { question: 'Who directed the film Harbour of Bells?', answer: 'Sabine Roe', supportingId: 'harbour-of-bells' },
      { question: 'In which city was #1 born?', answer: 'Dravenholm', supportingId: 'sabine-roe' },
      { question: 'Which river flows through the city #2?', answer: 'River Tolle', supportingId: 'dravenholm' },
    ],
  },
  {
    id: 'q04', question: 'What is the currency of the country whose capital is Halvik?', answers: ['ostra'],
    steps: [
      { question: 'Halvik is the capital of which kingdom?', answer: 'Ostrand', supportingId: 'halvik' },
      { question: 'What is the currency of #1?', answer: 'ostra', supportingId: 'ostra' },
    ],
  },
  {
    id: 'q05', question: 'What did the man after whom the stadium of Lunport Mariners is named invent?', answers: ['tidewheel'],
    steps: [
      { question: 'After which inventor is the stadium of Lunport Mariners named?', answer: 'Oren Castellan', supportingId: 'lunport-mariners' },
      { question: 'What machine did the inventor #1 build first?', answer: 'tidewheel', supportingId: 'oren-castellan' },
    ],
  },
  {
    id: 'q06', question: 'In which village was the co-discoverer of comet Osk–Farrow born?', answers: ['Brenwick'],
    steps: [
      { question: 'Which astronomer co-discovered the comet Osk–Farrow with Mirela Osk?', answer: 'Jonas Farrow', supportingId: 'comet-osk-farrow' },
      { question: 'In which village was the astronomer #1 born?', answer: 'Brenwick', supportingId: 'jonas-farrow' },
    ],
  },
  {
    id: 'q07', question: 'What is the highest mountain in the country where Teodor Vance was born?', answers: ['Mount Sorrow'],
    steps: [
      { question: 'In which country was the composer Teodor Vance born?', answer: 'Ostrand', supportingId: 'teodor-vance' },
      { question: 'What is the highest mountain in #1?', answer: 'Mount Sorrow', supportingId: 'mount-sorrow' },
    ],
  },
  {
    id: 'q08', question: 'Where did the sister of the first person to climb Mount Sorrow study?', answers: ['Halvik Academy of Arts'],
    steps: [
      { question: 'Who first climbed Mount Sorrow?', answer: 'Anders Holm', supportingId: 'mount-sorrow' },
      { question: 'Who was the sister of the mountaineer #1?', answer: 'Petra Holm', supportingId: 'anders-holm' },
      { question: 'Where did the architect #2 study?', answer: 'Halvik Academy of Arts', supportingId: 'petra-holm' },
    ],
  },
  {
    id: 'q09', question: 'Who founded the university in the birthplace of Ilsa Marrow?', answers: ['Edric Thane', 'Bishop Edric Thane'],
    steps: [
      { question: 'In which town was the novelist Ilsa Marrow born?', answer: 'Quillmoor', supportingId: 'ilsa-marrow' },
      { question: 'Who founded the university of #1?', answer: 'Edric Thane', supportingId: 'quillmoor-university' },
    ],
  },
  {
    id: 'q10', question: 'What is the population of the capital of the country where Lunport is?', answers: ['2.1 million', 'about 2.1 million'],
    steps: [
      { question: 'In which country is the seaport Lunport?', answer: 'Valdoria', supportingId: 'lunport' },
      { question: 'What is the capital of #1?', answer: 'Merrowgate', supportingId: 'valdoria' },
      { question: 'What is the population of the city #2?', answer: '2.1 million', supportingId: 'merrowgate' },
    ],
  },
  {
    id: 'q11', question: 'In what year was the observatory directed by Mirela Osk founded?', answers: ['1888'],
    steps: [
      { question: 'Which observatory does the astronomer Mirela Osk direct?', answer: 'Keswater Observatory', supportingId: 'mirela-osk' },
      { question: 'In what year was #1 founded?', answer: '1888', supportingId: 'keswater-observatory' },
    ],
  },
  {
    id: 'q12', question: 'Who is the chief executive of the company founded by the inventor of the tidewheel?', answers: ['Aldo Castellan'],
    steps: [
      { question: 'Who built the first practical tidewheel?', answer: 'Oren Castellan', supportingId: 'tidewheel' },
      { question: 'Which company did the inventor #1 found?', answer: 'Castellan Works', supportingId: 'oren-castellan' },
      { question: 'Who is the chief executive of #2?', answer: 'Aldo Castellan', supportingId: 'castellan-works' },
    ],
  },
  {
    id: 'q13', question: 'Which king founded the academy where the designer of the Ambrel Bridge studied?', answers: ['Harald III'],
    steps: [
      { question: 'Which architect designed the Ambrel Bridge?', answer: 'Petra Holm', supportingId: 'ambrel-bridge' },
      { question: 'At which academy did #1 study?', answer: 'Halvik Academy of Arts', supportingId: 'petra-holm' },
      { question: 'Which king founded #2?', answer: 'Harald III', supportingId: 'halvik-academy' },
    ],
  },
].map((question) => Object.freeze({ ...question, answers: Object.freeze(question.answers), steps: Object.freeze(question.steps.map((step) => Object.freeze(step))) })));
