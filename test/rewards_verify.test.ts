/**
 * verifyAnswer / verifyAnswers: a table of our own pairs, grouped by the categories of
 * issue 19, with both verdicts in each group. Each row also records what Math-Verify would
 * answer where its documentation and source say so (huggingface/Math-Verify at 5d148cf:
 * README "Key Features" and FAQ, `grader.py` `verify` / `sympy_expr_eq` with the defaults
 * float_rounding=6, strict=True, allow_set_relation_comp=False, and latex2sympy's percent
 * reading X% = X/100), or null where we cannot tell; where we decide differently the row
 * says why.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { answersMatch, findAnswer, verifyAnswer, verifyAnswers, type VerifyOptions } from '../lib/sdk.js';

/** [response, gold, our verdict, Math-Verify's verdict or null, why we differ]. */
type Row = [string, string, boolean, boolean | null, string?];

const box = (answer: string) => `Working through it, we find that the answer is $\\boxed{${answer}}$.`;

// ---------------------------------------------------------------- extraction
const extraction: Row[] = [
  ['<think>Let me add them.</think><answer>42</answer>', '42', true, null],
  ['<think>Adding 40 and 2, the answer is 41? No. <answer> 42 </answer>', '42', true, null],
  ['<answer>\\boxed{7}</answer>', '7', true, true],
  ['<answer>41</answer> but really \\boxed{42}', '42', false, null],
  ['\\boxed{3} first, then corrected: \\boxed{5}', '5', true, true],
  ['\\boxed{3} first, then corrected: \\boxed{5}', '3', false, false],
  ['\\fbox{12}', '12', true, null],
  ['nested: \\boxed{\\frac{1}{\\sqrt{2}}}', '\\frac{\\sqrt2}{2}', true, true],
  ['The value is $\\frac{3}{4}$.', '0.75', true, true],
  ['Thus \\[ \\frac{3}{4} \\]', '0.75', true, true],
  ['Therefore the result is \\(2\\sqrt{3}\\).', '\\sqrt{12}', true, true],
  ['We get $x=3$ and so $y = 4$.', '4', true, true],
  ['We get $x=3$ and so $y = 4$.', '3', false, false],
  ['Final Answer: The largest n is 34', '34', true, true],
  ['Final Answer: The largest n is 34', '43', false, false],
  ['the answer is 1,000.99', '1000.99', true, null],
  ['the answer is 1,000.99', '1000', false, false],
  ['**Answer:** 12 pct', '12', true, null],
  ['The final answer is $\\boxed{5}$. I hope it is correct.', '5', true, true],
  ['The final answer is 5. I hope it is correct.', '6', false, false],
  ['Answer: 3/4', '0.75', true, true],
  ['**Final Answer**\n\\[\\boxed{\\dfrac{3}{5}}\\]', '0.6', true, true],
  ['After all that, we have 17 apples left over in the basket in total.', '17', true, true],
  ['After all that, we have 17 apples left over in the basket in total.', '71', false, false],
  ['so x = \\boxed{-3}', '-3', true, true],
  ['so x = \\boxed{-3}', '3', false, false],
  ['The answer is \\boxed{3} (approximately 3.0).', '3', true, true],
  [`${'We keep reasoning for a long time. '.repeat(400)}The answer is 8.`, '8', true, true],
  ['I cannot solve this problem.', '4', false, false],
  ['', '4', false, false],
  ['\\boxed{}', '4', false, false],
  ['\\boxed{4', '4', false, null],
  ['The answer is 4', '\\boxed{4}', true, true],
  ['The answer is 5', '\\boxed{4}', false, false],
  ['\\boxed{1}, \\boxed{2}, \\boxed{3}', '\\{1,2,3\\}', true, true],
  ['\\boxed{1}, \\boxed{2}', '\\{1,2,3\\}', false, false],
  ['\\boxed{x=1} or \\boxed{x=2}', '1, 2', true, null],
  ['\\boxed{-2} and \\boxed{3}', '3, -2', true, true],
];

// ---------------------------------------------------------------- numbers
/** Groups of spellings of one value; pairs within a group are equal, across groups not. */
const numberGroups: string[][] = [
  ['\\frac{1}{2}', '\\dfrac{1}{2}', '\\tfrac12', '1/2', '0.5', '\\cfrac{1}{2}', '2^{-1}', '\\frac{2}{4}'],
  ['\\frac{3}{4}', '0.75', '3/4', '\\frac{6}{8}', '.75'],
  ['\\frac{5}{2}', '2\\frac{1}{2}', '2.5', '\\frac{10}{4}', '2 \\tfrac{1}{2}'],
  ['1000', '1,000', '1{,}000', '1\\,000', '1 000', '10^3', '1\\times 10^{3}', '1e3', '1000.0'],
  ['1500', '1.5\\times 10^{3}', '1.5e3', '1,500', '\\frac{3000}{2}'],
  ['-7', '-7.0', '-\\frac{14}{2}', '- 7'],
  ['2\\sqrt{2}', '\\sqrt{8}', '2^{3/2}', '\\frac{4}{\\sqrt{2}}'],
  ['\\frac{\\sqrt{3}}{3}', '\\frac{1}{\\sqrt{3}}', '\\frac{\\sqrt{3}}{3}'],
  ['\\frac{\\pi}{4}', '\\pi/4', '0.25\\pi', '\\frac14\\pi', '\\arctan 1'],
  ['3', '\\sqrt[3]{27}', '\\log_2 8', '\\frac{9}{3}', '3.0', '\\ln(e^3)'],
  ['10', '\\binom{5}{2}', '\\frac{5!}{2!\\,3!}', '10.00'],
  ['6.02\\times 10^{23}', '6.02e23', '602\\times 10^{21}'],
  ['0.001', '10^{-3}', '\\frac{1}{1000}', '1\\times10^{-3}'],
  ['\\frac{13}{4}', '3\\frac{1}{4}', '3.25'],
];
/** Near misses: each value against its closest wrong neighbour. */
const numberMisses: Row[] = [
  ['\\boxed{0.55}', '\\frac{1}{2}', false, false],
  ['\\boxed{\\frac{1}{3}}', '0.333333', true, true],
  ['\\boxed{\\frac{1}{3}}', '0.3333', false, false],
  ['\\boxed{0.33}', '\\frac13', false, false],
  ['\\boxed{1000001}', '1000000', false, false],
  ['\\boxed{10,000}', '1000', false, false],
  ['\\boxed{2,74}', '2.74', true, false, 'a decimal comma is common in model output (and in half of the world); Math-Verify reads "2,74" as the pair 2, 74'],
  ['\\boxed{2,74}', '274', false, null],
  ['\\boxed{3,5}', '3.5', true, false, 'decimal comma, as above'],
  ['\\boxed{1,000.99}', '1000.99', true, null],
  ['\\boxed{-7}', '7', false, false],
  ['\\boxed{2\\frac{1}{2}}', '2', false, false],
  ['\\boxed{2\\frac{1}{2}}', '1', false, false],
  ['\\boxed{\\sqrt{8}}', '3', false, false],
  ['\\boxed{3.14}', '\\pi', false, false],
  ['\\boxed{3.14159265}', '\\pi', true, true],
  ['\\boxed{1.5e3}', '150', false, false],
  ['\\boxed{9^{9^{9^{9}}}}', '9^{9^{9^{8}}}', false, null],
  ['\\boxed{0.\\overline{3}}', '\\frac13', true, null],
  ['\\boxed{-0}', '0', true, true],
  ['\\boxed{+5}', '5', true, true],
  ['\\boxed{5!}', '120', true, true],
  ['\\boxed{\\gcd(12, 18)}', '6', true, null],
  ['\\boxed{\\operatorname{lcm}(4, 6)}', '12', true, null],
  ['\\boxed{\\lfloor 3.7 \\rfloor}', '3', true, true],
  ['\\boxed{\\frac{1}{0}}', '1', false, false],
];

// ---------------------------------------------------------------- percent, units, currencies
const percentUnits: Row[] = [
  ['\\boxed{50\\%}', '0.5', true, true],
  ['\\boxed{50\\%}', '50', true, false, 'the percent sign read as a unit: a model that answers "50%" to "what percent …?" with gold 50 is right'],
  ['\\boxed{50\\%}', '5', false, false],
  ['\\boxed{50 percent}', '50\\%', true, null],
  ['the answer is 12 pct', '12\\%', true, null],
  ['the answer is 12 percentage points', '12', true, null],
  ['\\boxed{0.5}', '50\\%', true, true],
  ['\\boxed{0.05}', '50\\%', false, false],
  ['\\boxed{12.5\\%}', '\\frac{1}{8}', true, true],
  ['\\boxed{5\\text{ miles}}', '5', true, null],
  ['\\boxed{5\\text{ miles}}', '6', false, false],
  ['\\boxed{5\\mbox{cm}}', '5', true, null],
  ['\\boxed{18 \\text{ square units}}', '18', true, null],
  ['\\boxed{12 m^2}', '12', true, null],
  ['so the area is 12 m²', '12', true, null],
  ['\\boxed{\\$12.50}', '12.5', true, true],
  ['the answer is €12.50', '12.5', true, null],
  ['\\boxed{£7}', '7', true, null],
  ['\\boxed{\\$1{,}000}', '1000', true, null],
  ['\\boxed{12 dollars}', '12', true, null],
  ['\\boxed{12 dollars}', '13', false, false],
  ['\\boxed{30^\\circ}', '30', true, true],
  ['\\boxed{30^{\\circ}}', '30', true, true],
  ['\\boxed{30°}', '30', true, null],
  ['\\boxed{30 degrees}', '30', true, null],
  ['\\boxed{30^\\circ}', '60', false, false],
  ['\\boxed{7 \\text{ apples}}', '7', true, null],
  ['\\boxed{3 \\text{ hours}}', '180', false, false],
  ['\\boxed{50\\%}', '0.5', true, true],
];

// ---------------------------------------------------------------- symbolic expressions
const symbolic: Row[] = [
  ['\\boxed{\\tan^2 x + 1}', '\\sec^2 x', true, true],
  ['\\boxed{\\tan^2 x}', '\\sec^2 x', false, false],
  ['\\boxed{\\sin^2 x + \\cos^2 x}', '1', true, true],
  ['\\boxed{(x+1)^2}', 'x^2+2x+1', true, true],
  ['\\boxed{(x+1)^2}', 'x^2+1', false, false],
  ['\\boxed{x^2+2x}', 'x^2+2', false, false],
  ['\\boxed{\\frac{x^2-1}{x-1}}', 'x+1', true, true],
  ['\\boxed{2\\sin x\\cos x}', '\\sin 2x', true, true],
  ['\\boxed{2\\sin x}', '\\sin 2x', false, false],
  ['\\boxed{x^{1/2}}', '\\sqrt{x}', true, true],
  ['\\boxed{\\frac{a+b}{2}}', '\\frac{b+a}{2}', true, true],
  ['\\boxed{ab}', 'ba', true, true],
  ['\\boxed{\\pi r^2}', 'r^2\\pi', true, true],
  ['\\boxed{2\\pi r}', '\\pi r^2', false, false],
  ['\\boxed{\\frac{1}{x}}', 'x^{-1}', true, true],
  ['\\boxed{(a+b)^2}', 'a^2+b^2', false, false],
  ['\\boxed{x+y}', 'y+x', true, true],
  ['\\boxed{x-y}', 'y-x', false, false],
  ['\\boxed{e^{\\ln 3}}', '3', true, true],
  ['\\boxed{\\ln(e^2)}', '2', true, true],
  ['\\boxed{\\log(100)}', '2', true, null],
  ['\\boxed{\\cos(\\pi/3)}', '1/2', true, true],
  ['\\boxed{\\sin(\\pi/3)}', '1/2', false, false],
  ['\\boxed{\\sqrt{x^2}}', '|x|', true, false, 'variables are read as real numbers (the answers of school and olympiad problems); SymPy symbols are complex, where sqrt(x²) ≠ |x|'],
  ['\\boxed{|x|}', 'x', false, false],
  ['\\boxed{\\sqrt{x^2}}', 'x', false, false],
  ['\\boxed{\\frac{x}{2}+\\frac{x}{3}}', '\\frac{5x}{6}', true, true],
  ['\\boxed{\\frac{5x}{6}}', '\\frac{5}{6}', false, false],
  ['\\boxed{x^3-1}', '(x-1)(x^2+x+1)', true, true],
  ['\\boxed{x^3+1}', '(x-1)(x^2+x+1)', false, false],
  ['\\boxed{\\frac{2}{x+1}}', '\\frac{2}{x}+1', false, false],
  ['\\boxed{3+4i}', '4i+3', true, true],
  ['\\boxed{3+4i}', '3-4i', false, false],
  ['\\boxed{e^{i\\pi}}', '-1', false, true, 'i is compared as a free variable (which catches a+bi forms) but not as √−1; complex identities are left to a later version'],
  ['\\boxed{2^{10}}', '1024', true, true],
  ['\\boxed{2^{10}}', '1000', false, false],
  ['\\boxed{x_1 + x_2}', 'x_2 + x_1', true, true],
  ['\\boxed{x_1 + x_2}', 'x_1 + x_3', false, false],
  ['\\boxed{\\sqrt{3}\\,\\mathrm{cm}}', '\\sqrt{3}', true, null],
  ['\\boxed{\\frac{n(n+1)}{2}}', '\\frac{n^2+n}{2}', true, true],
  ['\\boxed{\\frac{n(n-1)}{2}}', '\\frac{n^2+n}{2}', false, false],
  ['\\boxed{\\sqrt{2}/2}', '\\frac{1}{\\sqrt 2}', true, true],
  ['\\boxed{\\frac{1}{2}x}', '\\frac{x}{2}', true, true],
  ['\\boxed{0.5x}', '\\frac{x}{2}', true, true],
  ['\\boxed{0.33x}', '\\frac{x}{3}', false, false],
  ['\\boxed{\\sqrt[3]{x^3}}', 'x', true, null],
];

// ---------------------------------------------------------------- equations and relations
const relations: Row[] = [
  ['\\boxed{x = 2}', '2', true, true],
  ['\\boxed{x = 3}', '2', false, false],
  ['\\boxed{2}', 'x = 2', true, true],
  ['\\boxed{3}', 'x = 2', false, false],
  ['\\boxed{y = 2x + 1}', '2x - y + 1 = 0', true, null],
  ['\\boxed{2x - y + 1 = 0}', 'y = 2x + 1', true, null],
  ['\\boxed{4x - 2y + 2 = 0}', 'y = 2x + 1', true, null],
  ['\\boxed{y = 2x - 1}', 'y = 2x + 1', false, false],
  ['\\boxed{x = 2}', 'y = 2', false, false],
  ['\\boxed{x \\geq 3}', '3 \\le x', true, true],
  ['\\boxed{x \\ge 3}', 'x >= 3', true, true],
  ['\\boxed{x ≥ 3}', 'x \\geq 3', true, null],
  ['\\boxed{x > 3}', 'x \\geq 3', false, false],
  ['\\boxed{x \\lt 3}', '3 > x', true, true],
  ['\\boxed{x < 3}', 'x > 3', false, false],
  ['\\boxed{x \\le 3}', 'x < 3', false, false],
  ['\\boxed{-2 \\le x \\le 7}', 'x \\in [-2, 7]', true, false, 'Math-Verify compares a gold set with a predicted relation only under allow_set_relation_comp (to stop a model restating the question inequality); we do not solve inequalities, so a restated x² < 4 cannot match (-2, 2) anyway, and a correct -2 ≤ x ≤ 7 should'],
  ['\\boxed{x \\in [-2, 7]}', '-2 \\le x \\le 7', true, true],
  ['\\boxed{[-2, 7]}', '-2 \\le x \\le 7', true, true],
  ['\\boxed{(-2, 7]}', '-2 \\le x \\le 7', false, false],
  ['\\boxed{-2 < x < 7}', '(-2, 7)', true, false, 'a relation answering a gold interval, as in the row above'],
  ['\\boxed{-2 < x \\le 7}', '(-2, 7)', false, false],
  ['\\boxed{x > 3}', '(3, \\infty)', true, false, 'a relation answering a gold interval, as in the rows above'],
  ['\\boxed{(3, \\infty)}', 'x > 3', true, true],
  ['\\boxed{[3, \\infty)}', 'x > 3', false, false],
  ['\\boxed{x < 1 \\text{ or } x > 3}', '(-\\infty, 1) \\cup (3, \\infty)', true, false, 'a relation answering a gold interval, as in the rows above'],
  ['\\boxed{(-\\infty,1)\\cup(3,\\infty)}', 'x<1 \\text{ or } x>3', true, true],
  ['\\boxed{x \\neq 3}', 'x \\ne 3', true, true],
  ['\\boxed{x \\neq 3}', 'x = 3', false, false],
  ['\\boxed{a+2z = 2z + a = 101}', '101', true, true],
  ['\\boxed{a+2z = 2z + a = 101}', '102', false, false],
  ['\\boxed{(p, q) = (3, 2)}', '(3, 2)', true, null],
  ['\\boxed{(3, 2)}', '(p, q) = (3, 2)', true, null],
  ['\\boxed{(2, 3)}', '(p, q) = (3, 2)', false, false],
  ['\\boxed{x^2 + y^2 = 1}', 'y^2 + x^2 = 1', true, true],
  ['\\boxed{x^2 + y^2 = 2}', 'x^2 + y^2 = 1', false, false],
  ['\\boxed{2x + 4 > 0}', 'x + 2 > 0', true, null],
  ['\\boxed{-x - 2 > 0}', 'x + 2 > 0', false, false],
  ['$x \\approx 2.718$', '2.718', true, true],
  ['The value is $\\approx 3.14$', '3.14', true, true],
];

// ---------------------------------------------------------------- sets, tuples, intervals
const sets: Row[] = [
  ['\\boxed{\\{1, 2\\}}', '\\{2, 1\\}', true, true],
  ['\\boxed{\\{1, 2\\}}', '\\{1, 3\\}', false, false],
  ['\\boxed{\\{1, 2\\}}', '\\{1, 2, 3\\}', false, false],
  ['\\boxed{\\{\\frac12, 2\\}}', '\\{2, 0.5\\}', true, true],
  ['\\boxed{1, 2}', '\\{2, 1\\}', true, true],
  ['\\boxed{2, 1}', '1, 2', true, true],
  ['\\boxed{x = 1, x = 2}', '1, 2', true, null],
  ['\\boxed{(3, 2)}', '(3, 2)', true, true],
  ['\\boxed{(2, 3)}', '(3, 2)', false, false],
  ['\\boxed{(1, 2, 3)}', '(1, 2, 3)', true, true],
  ['\\boxed{(1, 3, 2)}', '(1, 2, 3)', false, false],
  ['\\boxed{(1, 2)}', '(1, 2, 3)', false, false],
  ['\\boxed{\\left(\\frac{1}{2}, 3\\right)}', '(0.5, 3)', true, true],
  ['\\boxed{[1, 2)}', '[1, 2)', true, true],
  ['\\boxed{[1, 2)}', '[1, 2]', false, false],
  ['\\boxed{(1, 2]}', '[1, 2)', false, false],
  ['\\boxed{[1, 2]}', '[1, 2]', true, true],
  ['\\boxed{(0, 1)}', '(0, 1)', true, true],
  ['\\boxed{\\left[0, \\frac{\\pi}{2}\\right]}', '[0, \\pi/2]', true, true],
  ['\\boxed{(-\\infty, 1) \\cup (3, \\infty)}', '(3,\\infty)\\cup(-\\infty,1)', true, true],
  ['\\boxed{(-\\infty, 1] \\cup (3, \\infty)}', '(-\\infty,1)\\cup(3,\\infty)', false, false],
  ['\\boxed{(-\\infty, \\infty)}', '(-\\infty, \\infty)', true, true],
  ['\\boxed{\\emptyset}', '\\varnothing', true, true],
  ['\\boxed{\\{\\}}', '\\emptyset', true, true],
  ['\\boxed{\\emptyset}', '\\{0\\}', false, false],
  ['\\boxed{\\{1\\} \\cup \\{2\\}}', '\\{1, 2\\}', true, true],
  ['\\boxed{\\{1, 2, 3, 4\\}}', '\\{1,3\\} \\cup \\{2,4\\}', true, true],
  ['\\boxed{3 \\pm \\sqrt{2}}', '3+\\sqrt2, 3-\\sqrt2', true, null],
  ['\\boxed{3 \\pm \\sqrt{2}}', '3+\\sqrt2', false, false],
  ['\\boxed{\\pm 2}', '2, -2', true, null],
  ['\\boxed{\\langle 1, 2 \\rangle}', '(1, 2)', true, null],
  ['\\boxed{\\{(1, 2), (3, 4)\\}}', '\\{(3, 4), (1, 2)\\}', true, true],
  ['\\boxed{\\{(1, 2), (3, 4)\\}}', '\\{(2, 1), (3, 4)\\}', false, false],
  ['\\boxed{\\{5\\}}', '5', true, true],
];

// ---------------------------------------------------------------- matrices and vectors
const matrices: Row[] = [
  ['\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}}', '\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{bmatrix} \\frac{1}{2} & 0 \\\\ 0 & 1 \\end{bmatrix}}', '\\begin{bmatrix}0.5&0\\\\0&1\\end{bmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}', '\\begin{pmatrix}1\\\\2\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}1&2\\end{pmatrix}}', '\\begin{pmatrix}1\\\\2\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{array}{cc}1&2\\\\3&4\\end{array}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}', true, null],
  ['\\boxed{\\begin{pmatrix}2&4\\end{pmatrix}}', '2\\begin{pmatrix}1&2\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}2&5\\end{pmatrix}}', '2\\begin{pmatrix}1&2\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{pmatrix}4&6\\end{pmatrix}}', '\\begin{pmatrix}1&2\\end{pmatrix}+\\begin{pmatrix}3&4\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}19&22\\\\43&50\\end{pmatrix}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}\\begin{pmatrix}5&6\\\\7&8\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}5&12\\\\21&32\\end{pmatrix}}', '\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}\\begin{pmatrix}5&6\\\\7&8\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{pmatrix}x&0\\\\0&x^2\\end{pmatrix}}', '\\begin{pmatrix}x&0\\\\0&x\\cdot x\\end{pmatrix}', true, true],
  ['\\boxed{\\begin{pmatrix}x&0\\\\0&2x\\end{pmatrix}}', '\\begin{pmatrix}x&0\\\\0&x\\cdot x\\end{pmatrix}', false, false],
  ['\\boxed{\\begin{pmatrix}\\sqrt{8}\\\\1\\end{pmatrix}}', '\\begin{pmatrix}2\\sqrt2\\\\1\\end{pmatrix}', true, true],
];

// ---------------------------------------------------------------- text answers
const text: Row[] = [
  ['\\boxed{\\text{(B)}}', 'B', true, true],
  ['The answer is (C).', 'C', true, true],
  ['The answer is (C).', 'B', false, false],
  ['\\boxed{B}', '(B)', true, true],
  ['\\boxed{b}', 'B', true, null],
  ['\\boxed{B)}', 'B', true, null],
  ['\\boxed{A}', 'D', false, false],
  ['\\boxed{Yes}', 'yes', true, true],
  ['\\boxed{\\text{Yes}}', 'yes', true, true],
  ['Yes!', 'yes', true, null],
  ['\\boxed{No}', 'yes', false, false],
  ['\\boxed{\\text{no}}', 'No', true, true],
  ['\\boxed{\\text{Tuesday}}', 'tuesday', true, true],
  ['\\boxed{\\textbf{Tuesday}}', 'Tuesday', true, null],
  ['\\boxed{\\text{Wednesday}}', 'Tuesday', false, false],
  ['\\boxed{\\text{north east}}', 'North  East', true, null],
  ['\\boxed{\\text{north west}}', 'north east', false, false],
  ['\\boxed{\\mathrm{even}}', 'even', true, true],
  ['\\boxed{\\text{odd}}', 'even', false, false],
  ['\\boxed{\\text{Alice}}', 'alice', true, true],
  ['\\boxed{\\text{Bob}}', 'Alice', false, false],
  ['\\boxed{\\text{impossible}}', 'Impossible.', true, null],
];

// ---------------------------------------------------------------- table assembly
function numberRows(): Row[] {
  const rows: Row[] = [];
  numberGroups.forEach((group, g) => {
    for (let i = 0; i < group.length; i++) {
      for (let j = 0; j < group.length; j++) {
        if (i !== j && (i === 0 || j === 0 || j === i + 1)) rows.push([box(group[i]!), group[j]!, true, true]);
      }
      // Every spelling against the next group's first spelling (a different value).
      const other = numberGroups[(g + 1) % numberGroups.length]![0]!;
      rows.push([box(group[i]!), other, false, false]);
    }
  });
  return rows;
}

const categories: Record<string, Row[]> = {
  extraction,
  numbers: [...numberRows(), ...numberMisses],
  'percent, units, currencies': percentUnits,
  'symbolic expressions': symbolic,
  'equations and relations': relations,
  'sets, tuples, intervals': sets,
  'matrices and vectors': matrices,
  'text answers': text,
};

for (const [name, rows] of Object.entries(categories)) {
  describe(`verifyAnswer: ${name}`, () => {
    test('has true and false verdicts', () => {
      assert.ok(rows.some((row) => row[2]) && rows.some((row) => !row[2]));
    });
    for (const [index, [response, gold, expected]] of rows.entries()) {
      test(`#${index} ${JSON.stringify(response).slice(0, 70)} vs ${JSON.stringify(gold)} -> ${expected}`, () => {
        const verdict = verifyAnswer(response, gold);
        assert.equal(verdict.correct, expected, JSON.stringify(verdict));
        assert.equal(answersMatch(response, gold), expected);
      });
    }
  });
}

describe('agreement with Math-Verify', () => {
  const all = Object.values(categories).flat();
  const known = all.filter((row) => row[3] !== null);
  const differ = known.filter((row) => row[3] !== row[2]);
  test(`${all.length} pairs, Math-Verify known on ${known.length}, same verdict on ${known.length - differ.length} (${((100 * (known.length - differ.length)) / known.length).toFixed(1)}%)`, () => {
    assert.ok(all.length >= 300, `${all.length} pairs`);
    for (const row of differ) assert.ok(row[4] !== undefined && row[4].length > 20, `a row that differs from Math-Verify must say why: ${JSON.stringify(row)}`);
    for (const row of all) if (row[3] === row[2] || row[3] === null) assert.equal(row[4], undefined, `only differing rows explain: ${JSON.stringify(row)}`);
  });
});

describe('verifyAnswer: verdict fields and options', () => {
  test('extracted, reason and source', () => {
    assert.deepEqual(verifyAnswer('so $\\boxed{\\frac{1}{2}}$', '0.5'), { correct: true, extracted: '\\frac{1}{2}', reason: 'number', source: 'boxed' });
    assert.deepEqual(verifyAnswer('no idea', '0.5'), { correct: false, extracted: 'no idea', reason: 'different', source: 'whole' });
    assert.equal(verifyAnswer('x', '').reason, 'no-gold');
    assert.equal(verifyAnswer('\\boxed{x = 2}', '2').reason, 'assignment');
    assert.equal(verifyAnswer('<answer>7</answer>', '7').source, 'answer-tag');
    assert.equal(verifyAnswer(null as unknown as string, '7').reason, 'not-a-string');
  });
  test('tolerance', () => {
    assert.equal(verifyAnswer('\\boxed{3.14}', '\\pi').correct, false);
    assert.equal(verifyAnswer('\\boxed{3.14}', '\\pi', { tolerance: 0.01 }).correct, true);
    assert.equal(verifyAnswer('\\boxed{101.0}', '100', { relativeTolerance: 0.02 }).correct, true);
    assert.equal(verifyAnswer('\\boxed{101}', '100', { relativeTolerance: 0.02 }).correct, false, 'exact forms ignore the tolerance');
  });
  test('percentAsFraction', () => {
    assert.equal(verifyAnswer('\\boxed{50\\%}', '0.5', { percentAsFraction: false }).correct, false);
    assert.equal(verifyAnswer('\\boxed{50\\%}', '50', { percentAsFraction: false }).correct, true);
    assert.equal(verifyAnswer('\\boxed{0.5}', '50\\%', { percentAsFraction: false }).correct, false);
  });
  test('multipleBoxes', () => {
    assert.equal(verifyAnswer('\\boxed{1}, \\boxed{2}', '\\{1, 2\\}', { multipleBoxes: false }).correct, false);
    assert.equal(verifyAnswer('\\boxed{1}, \\boxed{2}', '\\{1, 2\\}').reason, 'boxes-as-set');
    assert.equal(verifyAnswer('\\boxed{1}, \\boxed{2}', '12').correct, false, 'a number gold is not a set');
  });
  test('lookback limits plain-text conclusions, not boxes', () => {
    const long = `The answer is 9. ${'filler text '.repeat(300)}`;
    assert.equal(verifyAnswer(long, '9').correct, true);
    assert.equal(verifyAnswer(`The answer is 9. ${'filler text '.repeat(1000)}`, '9').correct, false, 'past the default 4000 characters');
    assert.equal(verifyAnswer(long, '9', { lookback: 100 }).correct, false);
    assert.equal(verifyAnswer(`\\boxed{9} ${'filler text '.repeat(1000)}`, '9', { lookback: 100 }).correct, true);
  });
  test('invalid options are TypeError/RangeError naming the option', () => {
    assert.throws(() => verifyAnswer('1', '1', { tolerance: -1 }), /options\.tolerance/);
    assert.throws(() => verifyAnswer('1', '1', { tolerance: '1' } as unknown as VerifyOptions), TypeError);
    assert.throws(() => verifyAnswer('1', '1', { timeLimitMs: 0 }), RangeError);
    assert.throws(() => verifyAnswer('1', '1', { percentAsFraction: 1 } as unknown as VerifyOptions), /options\.percentAsFraction/);
    assert.throws(() => verifyAnswer('1', '1', { lookback: 2.5 }), RangeError);
    assert.throws(() => verifyAnswer('1', '1', 5 as unknown as VerifyOptions), TypeError);
  });
  test('deterministic: the same verdict every time', () => {
    const rows = Object.values(categories).flat().slice(0, 80);
    const first = rows.map(([r, g]) => JSON.stringify(verifyAnswer(r, g)));
    const second = rows.map(([r, g]) => JSON.stringify(verifyAnswer(r, g)));
    assert.deepEqual(second, first);
  });
  test('findAnswer sources', () => {
    assert.equal(findAnswer('\\boxed{1} and \\boxed{2}').source, 'boxed');
    assert.deepEqual(findAnswer('\\boxed{1} and \\boxed{2}').boxes, ['1', '2']);
    assert.equal(findAnswer('Thus $x = 4$.').source, 'math');
    assert.equal(findAnswer('We counted the cases and there are 12 in all of them.').source, 'last-number');
    assert.equal(findAnswer('3/4').source, 'whole');
    assert.equal(findAnswer('nothing useful here at all').answer, null);
  });
});

describe('verifyAnswer: hostile inputs and the time limit', () => {
  const hostile = [
    '\\boxed{' + '\\frac{'.repeat(300) + '}', '\\boxed{' + '('.repeat(290) + 'x' + ')'.repeat(290) + '}',
    `\\boxed{${'x^'.repeat(200)}2}`, `\\boxed{${'\\sqrt{'.repeat(150)}2${'}'.repeat(150)}}`,
    `\\boxed{${Array.from({ length: 60 }, (_, k) => `x_${k}`).join('+')}}`, `\\boxed{\\{${'1,'.repeat(290)}1\\}}`,
    `\\boxed{\\begin{pmatrix}${'1&'.repeat(280)}1\\end{pmatrix}}`, '<answer>'.repeat(10_000), '\\boxed{'.repeat(100_000),
    `\\boxed{${'9^{'.repeat(100)}9${'}'.repeat(100)}}`, '$'.repeat(100_000), 'The answer is '.repeat(20_000),
  ];
  for (const [index, response] of hostile.entries()) {
    test(`hostile #${index} (${response.length} chars) stays within the time limit`, () => {
      for (const gold of ['42', 'x+1', response.slice(0, 500)]) {
        const start = performance.now();
        const verdict = verifyAnswer(response, gold, { timeLimitMs: 200 });
        const elapsed = performance.now() - start;
        assert.equal(typeof verdict.correct, 'boolean');
        // The limit is checked between steps; a single parse is bounded by the 600-character cap.
        assert.ok(elapsed < 1500, `took ${elapsed.toFixed(0)} ms`);
      }
    });
  }
  test('a tiny time limit gives timeout, not a wrong verdict', () => {
    const verdict = verifyAnswer('\\boxed{(x+1)^{2}}', 'x^2+2x+1', { timeLimitMs: 1e-9 });
    assert.deepEqual([verdict.correct, verdict.reason], [false, 'timeout']);
  });
});

describe('verifyAnswers (worker threads)', () => {
  test('same verdicts as verifyAnswer, in order, with progress', async () => {
    const rows = Object.values(categories).flat();
    const items = rows.map(([response, gold]) => ({ response, gold }));
    const progress: number[] = [];
    // A generous limit: this test is about order and equality, not about a loaded machine's timeouts.
    const verdicts = await verifyAnswers(items, { threads: 2, chunkSize: 50, timeLimitMs: 10_000, onProgress: (done, total) => { assert.equal(total, items.length); progress.push(done); } });
    const wrong = verdicts.flatMap((v, k) => (v.correct === rows[k]![2] ? [] : [`${JSON.stringify(rows[k])} -> ${JSON.stringify(v)}`]));
    assert.deepEqual(wrong, []);
    assert.deepEqual(verdicts, items.map((item) => verifyAnswer(item.response, item.gold)));
    assert.equal(progress[progress.length - 1], items.length);
    assert.ok(progress.every((value, k) => k === 0 || value > progress[k - 1]!));
  });
  test('empty batch, bad items and options', async () => {
    assert.deepEqual(await verifyAnswers([]), []);
    await assert.rejects(() => verifyAnswers([null as unknown as { response: string; gold: string }]), /items\[0\]/);
    await assert.rejects(() => verifyAnswers([{ response: '1', gold: '1' }], { threads: 0 }), /options\.threads/);
    await assert.rejects(() => verifyAnswers([{ response: '1', gold: '1' }], { tolerance: -1 }), /options\.tolerance/);
    const [verdict] = await verifyAnswers([{ response: 5 as unknown as string, gold: '5' }], { threads: 1 });
    assert.equal(verdict!.reason, 'not-a-string');
  });
});
