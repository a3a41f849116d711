// node test.mjs: runs fixtures/*.json against app.js with plain Node (no
// WebAssembly); `chitin policy test` runs the same files against the component.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveName } from './app.js';

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures');
let failed = 0;
const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
for (const f of files) {
  const fx = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
  const got = resolveName({ env: fx.input.env ?? [], hostname: fx.input.hostname });
  const ok = 'ok' in fx.expect ? got === fx.expect.ok : got === '' || got.includes(':');
  if (!ok) { failed++; console.log(`FAIL ${f}: got ${JSON.stringify(got)}, want ${JSON.stringify(fx.expect)}`); }
}
console.log(`${files.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
