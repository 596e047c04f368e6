// Regenerates the expected GPT-NeoX-20B token ids that coil's tokenizer tests compare with,
// using Hugging Face's own tokenizers library (its Rust core, through the Node bindings,
// pinned in package-lock.json): an implementation independent of coil's.
//
//   cd tests/data/tokenizer && npm ci && node gen_vectors.mjs
//
// Writes, next to this script:
//   gpt_neox_vectors.jsonl         one {"text", "nfc", "ids", "decoded", "decoded_skip_special"}
//                                  per test string
//   gpt_neox_decode_vectors.jsonl  one {"ids", "decoded", "decoded_skip_special"} per id list
//                                  (random ids, byte tokens cut mid-sequence)
//   gpt_neox_char_classes.json     the class the split pattern gives each code point, as runs
//                                  [first, last, "L"|"N"|"S"] (every other code point is "P")
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from 'tokenizers';

const here = dirname(fileURLToPath(import.meta.url));
const tokenizerPath = join(here, '../../../engine/tokenizer/gpt-neox-20b/tokenizer.json');
const tokenizer = Tokenizer.fromFile(tokenizerPath);

// A fixed pseudo-random sequence (mulberry32), so the output is reproducible.
function random(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const prose = [
  'The quick brown fox jumps over the lazy dog.',
  'Hello world',
  'Hello  world',
  'It was the best of times, it was the worst of times, it was the age of wisdom.',
  'Mamba is a state-space model; unlike attention, its state has a fixed size.',
  'She sells sea shells by the sea shore.',
  'In 1969, Neil Armstrong walked on the Moon (July 20th, to be exact).',
  'Please call me at 555-0123 or e-mail me at someone@example.com!',
  'A sentence with a URL: https://www.example.org/path?query=1&other=two#frag',
  'Tokenization is the first step; detokenization is the last.',
  'The year 2024 had 366 days. The year 2023 had 365.',
  'Mr. Smith went to Washington D.C. on Jan. 5, 2020.',
  'Supercalifragilisticexpialidocious antidisestablishmentarianism',
  'UPPERCASE WORDS AND lowercase words And Title Case Words',
  'hyphenated-words and snake_case and camelCase and PascalCase',
];

const code = [
  'def add(a, b):\n    return a + b\n',
  'for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}',
  '#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }',
  '{"key": "value", "list": [1, 2.5, -3e10], "nested": {"a": null}}',
  '<div class="container"><p>Hello &amp; welcome</p></div>',
  'SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;',
  'if x != y && z == 0 || !flag { return Err(e)?; }',
  '    indented with four spaces\n        and eight\n',
  'x=1;y=2;z=x+y*3/4-5%6',
  'console.log(`template ${literal} here`);',
  'fn main() -> Result<(), Box<dyn Error>> { Ok(()) }',
  '$ ls -la /usr/bin | grep "^d" > out.txt 2>&1',
  '// comment\n/* block\n   comment */',
  'lambda: [i**2 for i in range(10) if i % 2 == 0]',
];

const spaces = [
  ' leading space', 'trailing space ', '  two leading', 'two trailing  ', '   three',
  'a  b', 'a   b', 'a    b', 'a' + ' '.repeat(23) + 'b', 'a' + ' '.repeat(24) + 'b',
  'a' + ' '.repeat(25) + 'b', 'a' + ' '.repeat(30) + 'b', 'a' + ' '.repeat(49) + 'b',
  ' ', '  ', '   ', ' '.repeat(24), ' '.repeat(25), ' '.repeat(60), ' x ', '  x  ',
  'end with spaces   ', '. . .', 'a b c d e f g', ' !', '  !', ' 1', '  1', ' \u00e9',
  '  \u00e9t\u00e9',
];

const whitespace = [
  'a\tb', '\tindented', '\t\tdouble tab', 'tab at end\t', 'a\nb', 'a\n\nb', 'a\n\n\nb',
  'line1\r\nline2\r\n', '\r\n', '\n', '\n\n', ' \n ', 'x \n y', 'x\n y', 'x \ny', 'a\r\n\r\nb',
  'mixed \t\n whitespace', '\u000b\u000c', 'a\u000bb', 'a\u00a0b', 'a\u00a0\u00a0b', 'x\u3000y',
  'x\u3000\u3000y', 'a\u2003b', 'a \u00a0 b', '\u2028\u2029', 'x\u202fy', 'x\u1680y',
  'trailing newline\n', '\n\nleading newlines', ' \t \t ', 'a\u0085b', 'x\u200by',
];

const numbers = [
  '2024-01-15', '15/01/2024', '12:30:45', '3.14159', '1,000,000', '-42', '+7', '1e-9',
  '0x1F', '1234567890123456789', '007', '½ cup', '² and ³', 'Ⅻ', '٣٤٥ arabic digits',
  '१२३ devanagari digits', 'version 1.2.3-beta', 'pi=3.14,e=2.718', '100%', '$5.99', '€10',
  '10km/h', 'H2O', 'mp3 and mp4', 'room 101b', '1st 2nd 3rd 4th',
];

const punctuation = [
  '!!!', '...', '?!?!', '--', '---', '==>', '((()))', '"quoted"', "'single'", '«guillemets»',
  '¿Qué?', '¡Hola!', '…', '—dash—', '*bold* _italic_', '@#$%^&*', '[x](y)', '~/.config',
  'a.b.c', 'end.', 'what?!', ',,,', ';;', '::', '  ...  ', '\\n is not a newline', '|||',
  '<<>>', '#hashtag', '@mention',
];

const contractions = [
  "don't", "DON'T", "Don't", "I'LL", "I'll", "we're", "WE'RE", "they've", "THEY'VE", "I'm",
  "I'M", "he'd", "HE'D", "it's", "IT'S", "'s", "''s", "rock'n'roll", "'ll'", "can't won't",
  "she's got it", "'twas", "y'all", "o'clock", "students' books", "'re'", "x'd'y", "' s",
  "it ' s", "the dog's bone's",
];

const accents = [
  'café', 'cafe\u0301', 'naïve résumé', 'Ångström', '\u212b', 'A\u030a', 'e\u0301\u0302',
  'ñandú', 'n\u0303', 'q\u0307\u0323', '\u1100\u1161\u11a8', '한국어 텍스트', 'Straße',
  'Œuvre', 'ﬁ ligature', 'Ḱ', 'o\u0308\u0304', 'Ỳ', 'Dvořák', 'Łódź', 'ǅ titlecase',
  'x\u0301', '\u0301 combining first', 'a\u0328\u0301', 'Ελληνικά', 'ΣΊΣΥΦΟΣ',
];

const scripts = [
  '你好，世界', '日本語のテキスト', '漢字かなカナ', '中文 English 混合', 'Привет, мир!',
  'Съешь же ещё этих мягких французских булок', 'مرحبا بالعالم', 'العربية: ١٢٣',
  'שלום עולם', 'नमस्ते दुनिया', 'สวัสดีครับ', 'ქართული', 'Հայերեն', 'ᚠᚢᚦᚨᚱᚲ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '𝟙𝟚𝟛', '𠜎𠜱𠝹', 'ㄅㄆㄇ', 'ꦧꦱꦗꦮ', 'தமிழ்',
];

const emoji = [
  '👍', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '😀😃😄', '❤️', '🇺🇸🇫🇷', 'a😀b', 'I ❤ NY', '🤷🏿‍♀️',
  'emoji at end 🎉', '🎉 emoji at start', '👩🏻‍💻 coding', '1️⃣2️⃣', '🫠', '☕️ and 🍵',
  '🧑🏾‍🤝‍🧑🏼', ' 🙂', '  🙂', '🙂🙂🙂',
];

const controls = [
  '\u0000', 'a\u0000b', '\u0001\u0002\u0003', '\u007f', '\u001b[31mred\u001b[0m',
  '\u0007bell', 'x\u001cy', 'x\u001f', '\ufeffbom', '\u200d', '\u00ad soft hyphen',
  '\u2060word joiner', '\ue000 private use', '\ufffd replacement', '\ufffe', '\u{10ffff}',
];

const special = [
  '<|endoftext|>', 'Hello<|endoftext|>world', '<|endoftext|><|endoftext|>',
  '<|endoftext|> x', 'x <|endoftext|>', '<|padding|>', '<|endoftext|', '< |endoftext|>',
  '<|endoftext|>\n\nNext document', 'text  <|endoftext|>  text', '<|END|>',
  '<|endoftext|><|padding|>end',
];

const longParagraph = [
  'Language models turn text into tokens before they can read it. ',
  "A tokenizer that differs from the model's own by even one id on rare inputs can ",
  'derail a generation, so the engine must reproduce the reference exactly: the added ',
  'tokens, the normalization, the split into words, and the merges. ',
  'Consider prices like $1,299.99, dates like 2026-12-02, and code like `x += 1;`. ',
  "Don't forget contractions, or the way    several spaces\tand tabs\nbehave.\n\n",
  'Unicode matters too: naïve café, 東京, Москва, and emoji such as 🚀 or 👨‍🚀. ',
].join('').repeat(12);

// Random mixtures of the fragments above and of the trickiest joints (spaces before
// marks, apostrophes before letters, whitespace before non-spaces).
const fragments = [
  'the', 'The', 'of', "'s", "'t", "'LL", "'re", ' ', '  ', '   ', '\t', '\n', '\r\n', '\u00a0',
  '\u3000', '0', '42', '3.5', '٣', '!', '?', '...', '-', '(', ')', '"', "'", 'é', 'e\u0301',
  '\u0301', '中', '文', 'я', 'ب', '😀', '👍🏽', '‍', '<|endoftext|>', '<|padding|>', 'x',
  'Hello', 'world', '\u0000', '\u001b', '_', '#', 'ǅ', '𝔘', 'ß',
];
const mixtures = [];
const rand = random(20261202);
for (let i = 0; i < 90; ++i) {
  const count = 1 + Math.floor(rand() * 14);
  let text = '';
  for (let j = 0; j < count; ++j) text += fragments[Math.floor(rand() * fragments.length)];
  mixtures.push(text);
}

// Words longer than 48 bytes, which take the priority-queue merge path.
const longWords = [
  '9'.repeat(120),
  '31415926535897932384626433832795028841971693993751058209749445923078164062862089986280348',
  '!'.repeat(100),
  '=-'.repeat(60),
  'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(3),
  'aGVsbG8gd29ybGQgdGhpcyBpcyBhIGJhc2U2NCBibG9iIHRoYXQgZ29lcyBvbiBhbmQgb24gYW5kIG9u',
  'https://example.com/a/very/long/path/with/many/segments/and/a/query?x=1&y=2&z=3',
  '中文'.repeat(40),
  'é'.repeat(30),
];

const texts = [
  '', ...prose, ...code, ...spaces, ...whitespace, ...numbers, ...punctuation,
  ...contractions, ...accents, ...scripts, ...emoji, ...controls, ...special, ...longWords,
  longParagraph,
  ...mixtures,
];

const lines = [];
for (const text of texts) {
  const encoding = await tokenizer.encode(text);
  const ids = encoding.getIds();
  lines.push(JSON.stringify({
    text,
    nfc: text.normalize('NFC'),
    ids,
    decoded: await tokenizer.decode(ids, false),
    decoded_skip_special: await tokenizer.decode(ids, true),
  }));
}
writeFileSync(join(here, 'gpt_neox_vectors.jsonl'), lines.join('\n') + '\n');
console.error(`gpt_neox_vectors.jsonl: ${lines.length} strings`);

// Id lists that do not come from encoding text: random ids over the whole vocabulary, and
// byte tokens of multi-byte characters cut, reordered or left unfinished, so that decoding
// has to repair broken UTF-8 the way the reference does.
const vocabSize = tokenizer.getVocabSize(true);
// GPT-2's bytes_to_unicode(): the vocabulary spells byte b as this character.
const byteChar = [];
{
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    byteChar.push(String.fromCodePoint(printable ? b : next++));
  }
}
const byteTokens = new Map();
for (let b = 0; b < 256; ++b) {
  const id = tokenizer.tokenToId(byteChar[b]);
  if (id !== null && id !== undefined) byteTokens.set(b, id);
}
const byteToken = (byte) => byteTokens.get(byte);
const decodeCases = [];
const randIds = random(7);
for (let i = 0; i < 40; ++i) {
  const count = 1 + Math.floor(randIds() * 12);
  const ids = [];
  for (let j = 0; j < count; ++j) ids.push(Math.floor(randIds() * vocabSize));
  decodeCases.push(ids);
}
const utf8Of = (s) => [...Buffer.from(s, 'utf8')];
for (const s of ['😀', '👍🏽', 'é', '中', '𠜎', 'a😀b']) {
  const bytes = utf8Of(s).filter((b) => byteTokens.has(b));
  decodeCases.push(bytes.map(byteToken));                      // whole
  decodeCases.push(bytes.slice(0, -1).map(byteToken));         // cut short
  decodeCases.push(bytes.slice(1).map(byteToken));             // no lead byte
  decodeCases.push([...bytes].reverse().map(byteToken));       // reordered
  decodeCases.push([0, ...bytes.slice(0, 2).map(byteToken), 0, ...bytes.map(byteToken)]);
}
const decodeLines = [];
for (const ids of decodeCases) {
  if (ids.some((id) => id === undefined)) continue;
  decodeLines.push(JSON.stringify({
    ids,
    decoded: await tokenizer.decode(ids, false),
    decoded_skip_special: await tokenizer.decode(ids, true),
  }));
}
writeFileSync(join(here, 'gpt_neox_decode_vectors.jsonl'), decodeLines.join('\n') + '\n');
console.error(`gpt_neox_decode_vectors.jsonl: ${decodeLines.length} id lists`);

// The class of every code point under the split pattern, probed through the reference's
// own pre-tokenizer: after a letter, a letter joins the piece ("\p{L}+"); after a digit, a
// number does; after "!", a character that is neither space, letter nor number does; a
// whitespace character joins none of the three.
const preTokenizer = tokenizer.getPreTokenizer();
const pieces = (s) => preTokenizer.preTokenizeString(s).length;
const classOf = (cp) => {
  const c = String.fromCodePoint(cp);
  if (pieces('a' + c) === 1) return 'L';
  if (pieces('1' + c) === 1) return 'N';
  if (pieces('!' + c) === 1) return 'P';
  return 'S';
};
const runs = [];
for (let cp = 0; cp <= 0x10ffff; ++cp) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;  // surrogates are not text
  const cls = classOf(cp);
  const last = runs[runs.length - 1];
  if (last && last[2] === cls && last[1] === cp - 1) last[1] = cp;
  else runs.push([cp, cp, cls]);
}
const classRuns = runs.filter((run) => run[2] !== 'P');
writeFileSync(join(here, 'gpt_neox_char_classes.json'),
              '[\n' + classRuns.map((run) => JSON.stringify(run)).join(',\n') + '\n]\n');
console.error(`gpt_neox_char_classes.json: ${classRuns.length} runs`);
