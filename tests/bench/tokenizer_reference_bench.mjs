// Times Hugging Face's tokenizers (the Rust implementation, through its Node bindings, as
// pinned in tests/data/tokenizer/package-lock.json) encoding the same English prose as
// tokenizer_bench's BM_EncodeEnglishProse, with each family's tokenizer.json, so that
// coil's figures stand beside the reference's on one machine.
//
//   (cd tests/data/tokenizer && npm ci)
//   RAYON_NUM_THREADS=1 node tests/bench/tokenizer_reference_bench.mjs [FAMILY_DIR]
//
// FAMILY_DIR defaults to build/tokenizer-families (where the tests fetch the files). The word
// cache is warmed by one encode first, as in tokenizer_bench. Prints MB/s by wall time and
// by the process's CPU time (which counts every thread), for the text in one call (as
// tokenizer_bench encodes it) and cut into 64 pieces of about 3 kB (the reference is faster
// on shorter inputs).
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '../data/tokenizer/package.json'));
const { Tokenizer } = require('tokenizers');
const familyDir = process.argv[2] ?? join(here, '../../build/tokenizer-families');

const licenses = ['GPL-3', 'GPL-2', 'LGPL-2.1', 'GFDL-1.3', 'MPL-2.0', 'MPL-1.1', 'Apache-2.0',
                  'Artistic', 'CC0-1.0', 'LGPL-3', 'GPL-1'];
const prose = licenses.map((name) => readFileSync(join('/usr/share/common-licenses', name), 'utf8')).join('');
const bytes = Buffer.byteLength(prose, 'utf8');

const files = {
  'gpt-neox': join(here, '../../engine/tokenizer/gpt-neox-20b/tokenizer.json'),
  llama3: join(familyDir, 'llama3/tokenizer.json'),
  qwen3: join(familyDir, 'qwen3/tokenizer.json'),
  gemma3: join(familyDir, 'gemma3/tokenizer.json'),
  llama2: join(familyDir, 'llama2/tokenizer.json'),
};
console.log(`English prose: ${bytes} bytes`);
for (const [family, path] of Object.entries(files)) {
  if (!existsSync(path)) {
    console.log(`${family}: no ${path}`);
    continue;
  }
  const tokenizer = Tokenizer.fromFile(path);
  for (const pieces of [1, 64]) {
    const parts = [];
    const step = Math.ceil(prose.length / pieces);
    for (let i = 0; i < prose.length; i += step) parts.push(prose.slice(i, i + step));
    const encodeAll = async () => {
      let tokens = 0;
      for (const part of parts) {
        tokens += (await tokenizer.encode(part, null, { addSpecialTokens: false })).getIds().length;
      }
      return tokens;
    };
    const tokens = await encodeAll();  // warms the word cache
    let iterations = 0;
    const cpuStart = process.cpuUsage();
    const start = process.hrtime.bigint();
    let elapsed = 0;
    while (elapsed < 2e9 || iterations < 5) {
      await encodeAll();
      ++iterations;
      elapsed = Number(process.hrtime.bigint() - start);
    }
    const cpu = process.cpuUsage(cpuStart);
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    const wallMBs = (bytes * iterations) / (elapsed / 1e9) / 1e6;
    const cpuMBs = (bytes * iterations) / cpuSeconds / 1e6;
    console.log(`${family}, ${pieces === 1 ? 'one call' : `${pieces} calls`}: ${tokens} tokens, ` +
                `${iterations} runs, ${wallMBs.toFixed(1)} MB/s wall, ` +
                `${cpuMBs.toFixed(1)} MB/s per CPU second`);
  }
}
