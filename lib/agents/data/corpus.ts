/**
 * A small encyclopedia of a fictional world (two countries, Valdoria and Ostrand, and their
 * people, places and works), written for tirl so the decomposer–solver runs offline. Facts
 * are consistent across passages, and most questions about them need two or three passages.
 */
import type { CorpusDocument } from '../retrieval.js';

/** The built-in corpus: 41 short passages, each with a stable id and a title. */
export const BUILTIN_CORPUS: readonly CorpusDocument[] = Object.freeze([
  { id: 'valdoria', title: 'Valdoria', text: 'Valdoria is a republic on the western coast of the Amber Sea. Its capital and largest city is Merrowgate, and its currency is the Valdorian mark. Its other cities include the seaport Lunport and the university town Quillmoor.' },
  { id: 'ostrand', title: 'Ostrand', text: "The Kingdom of Ostrand lies north of Valdoria, across the valley of the River Tolle. Its capital is Halvik, a port on the Grey Gulf. Ostrand's currency is the ostra, and its highest peak is Mount Sorrow." },
  { id: 'merrowgate', title: 'Merrowgate', text: 'Merrowgate is the capital of Valdoria. The River Ambrel flows through the city, which has a population of about 2.1 million. The Ambrel Bridge links its old and new quarters.' },
  { id: 'halvik', title: 'Halvik', text: 'Halvik is the capital of the Kingdom of Ostrand and its busiest port. It is home to the Halvik Academy of Arts and to the Royal Lantern Hall, a concert venue.' },
  { id: 'lunport', title: 'Lunport', text: 'Lunport is a seaport in Valdoria at the mouth of the River Ambrel. It is the home of the engineering firm Castellan Works and of the football club Lunport Mariners.' },
  { id: 'quillmoor', title: 'Quillmoor', text: 'Quillmoor is a university town in central Valdoria. Quillmoor University dominates its old town. The novelist Ilsa Marrow was born in Quillmoor.' },
  { id: 'brenwick', title: 'Brenwick', text: 'Brenwick is a village in the hills of southern Valdoria, known for its smoked cheese. The astronomer Jonas Farrow was born in Brenwick in 1891.' },
  { id: 'dravenholm', title: 'Dravenholm', text: 'Dravenholm is a city in Ostrand on the River Tolle, famous for its glassblowing workshops. The film director Sabine Roe was born in Dravenholm.' },
  { id: 'keswater', title: 'Keswater', text: 'Keswater is a small town in the highlands of Ostrand. It is best known for Keswater Observatory, whose clear skies attract astronomers.' },
  { id: 'keswater-observatory', title: 'Keswater Observatory', text: 'Keswater Observatory was founded in 1888 by the Ostrand Astronomical Society. Since 1930 its director has been the astronomer Mirela Osk.' },
  { id: 'river-ambrel', title: 'River Ambrel', text: 'The River Ambrel rises in the Sorrow Range and flows west through Merrowgate before it reaches the Amber Sea at Lunport.' },
  { id: 'river-tolle', title: 'River Tolle', text: 'The River Tolle forms part of the border between Valdoria and Ostrand. It flows through Dravenholm, and its valley is known for orchards.' },
  { id: 'mount-sorrow', title: 'Mount Sorrow', text: 'Mount Sorrow is the highest mountain in Ostrand, rising 4,210 metres. It was first climbed in 1921 by the mountaineer Anders Holm.' },
  { id: 'anders-holm', title: 'Anders Holm', text: 'Anders Holm (1895–1960) was an Ostrandic mountaineer who made the first ascent of Mount Sorrow in 1921. His younger sister was the architect Petra Holm.' },
  { id: 'petra-holm', title: 'Petra Holm', text: 'Petra Holm (1899–1977) was an architect born in Halvik. She studied at the Halvik Academy of Arts and later designed the Ambrel Bridge in Merrowgate.' },
  { id: 'ambrel-bridge', title: 'Ambrel Bridge', text: 'The Ambrel Bridge is a stone arch bridge over the River Ambrel in Merrowgate. Designed by the architect Petra Holm, it opened in 1934.' },
  { id: 'halvik-academy', title: 'Halvik Academy of Arts', text: 'The Halvik Academy of Arts was founded in 1802 by King Harald III of Ostrand. It teaches architecture, painting and music.' },
  { id: 'ilsa-marrow', title: 'Ilsa Marrow', text: 'Ilsa Marrow (1902–1971) was a Valdorian novelist born in Quillmoor. Her best-known novel is The Glass Orchard. She married the composer Teodor Vance in 1929.' },
  { id: 'glass-orchard-novel', title: 'The Glass Orchard (novel)', text: 'The Glass Orchard is a 1931 novel by Ilsa Marrow about a family of glassblowers. It was adapted into a film of the same name in 1958.' },
  { id: 'glass-orchard-film', title: 'The Glass Orchard (film)', text: 'The Glass Orchard is a 1958 film directed by Sabine Roe, adapted from the novel by Ilsa Marrow. It was shot on location in Dravenholm.' },
  { id: 'sabine-roe', title: 'Sabine Roe', text: 'Sabine Roe (1915–1990) was a film director born in Dravenholm, Ostrand. Her films include The Glass Orchard and Harbour of Bells.' },
  { id: 'teodor-vance', title: 'Teodor Vance', text: 'Teodor Vance (1898–1966) was a composer born in Halvik, Ostrand. He wrote the Symphony of Lanterns and was married to the novelist Ilsa Marrow.' },
  { id: 'symphony-of-lanterns', title: 'Symphony of Lanterns', text: 'The Symphony of Lanterns is a symphony by Teodor Vance, first performed in 1936 at the Royal Lantern Hall in Halvik.' },
  { id: 'oren-castellan', title: 'Oren Castellan', text: 'Oren Castellan (1861–1932) was a Valdorian inventor who built the first tidewheel, a machine that turns tidal currents into power. He founded Castellan Works in Lunport in 1890.' },
  { id: 'castellan-works', title: 'Castellan Works', text: "Castellan Works is an engineering company founded in Lunport in 1890 by Oren Castellan. Its chief executive is Aldo Castellan, the founder's grandson." },
  { id: 'tidewheel', title: 'Tidewheel', text: 'A tidewheel is a water wheel driven by tidal currents. The first practical tidewheel was built by the inventor Oren Castellan in 1887.' },
  { id: 'lunport-mariners', title: 'Lunport Mariners', text: 'Lunport Mariners is a football club from Lunport, founded in 1899. The club plays at Castellan Park, a stadium named after the inventor Oren Castellan.' },
  { id: 'castellan-park', title: 'Castellan Park', text: 'Castellan Park is a football stadium in Lunport that seats 31,000 people. It opened in 1924 and is the home ground of Lunport Mariners.' },
  { id: 'mirela-osk', title: 'Mirela Osk', text: 'Mirela Osk (1896–1979) was an Ostrandic astronomer and the director of Keswater Observatory. With Jonas Farrow she discovered the comet Osk–Farrow in 1927.' },
  { id: 'jonas-farrow', title: 'Jonas Farrow', text: 'Jonas Farrow (1891–1958) was a Valdorian astronomer born in Brenwick. He co-discovered the comet Osk–Farrow with Mirela Osk.' },
  { id: 'comet-osk-farrow', title: 'Comet Osk–Farrow', text: 'Comet Osk–Farrow is a periodic comet that returns every 41 years. It was discovered in 1927 by the astronomers Mirela Osk and Jonas Farrow.' },
  { id: 'quillmoor-university', title: 'Quillmoor University', text: 'Quillmoor University was founded in 1650 by Bishop Edric Thane. It is the oldest university in Valdoria.' },
  { id: 'edric-thane', title: 'Edric Thane', text: 'Edric Thane (1601–1672) was a Valdorian bishop and scholar who founded Quillmoor University in 1650.' },
  { id: 'valdorian-mark', title: 'Valdorian mark', text: 'The Valdorian mark is the currency of Valdoria. It is issued by the Bank of Merrowgate.' },
  { id: 'ostra', title: 'Ostra', text: 'The ostra is the currency of the Kingdom of Ostrand. One ostra is divided into 100 pennings.' },
  { id: 'harald-iii', title: 'Harald III', text: 'Harald III (1761–1830) was King of Ostrand from 1790. He founded the Halvik Academy of Arts in 1802.' },
  { id: 'harbour-of-bells', title: 'Harbour of Bells', text: 'Harbour of Bells is a 1949 film directed by Sabine Roe, set in the port of Halvik.' },
  { id: 'royal-lantern-hall', title: 'Royal Lantern Hall', text: 'The Royal Lantern Hall is a concert hall in Halvik that opened in 1911. The Symphony of Lanterns had its premiere there in 1936.' },
  { id: 'amber-sea', title: 'Amber Sea', text: 'The Amber Sea lies west of Valdoria. Lunport, at the mouth of the River Ambrel, is its largest port.' },
  { id: 'bank-of-merrowgate', title: 'Bank of Merrowgate', text: 'The Bank of Merrowgate is the central bank of Valdoria, founded in 1821. It issues the Valdorian mark.' },
  { id: 'sorrow-range', title: 'Sorrow Range', text: 'The Sorrow Range is a mountain range in Ostrand. Its highest peak is Mount Sorrow, and the River Ambrel rises on its western slopes.' },
].map((document) => Object.freeze(document)));
