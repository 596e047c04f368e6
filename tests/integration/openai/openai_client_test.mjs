// coil-serve's OpenAI-compatible HTTP API driven by the official OpenAI Node client
// (openai, pinned in package-lock.json) against live servers this test starts on a tiny
// random model, at TP1 (coil-serve alone) and TP2 (under mpirun). Expected values come from
// independent paths: the gRPC API (coil-cli) for the same greedy request, the streamed and
// non-streamed forms of one request, the chat template rendered by hand and sent as a
// completion, the request itself (token counts, finish reasons), and the server's
// metrics (every state row free again once a client has gone).
//
// Run by openai_client_test.sh with COIL_SERVE, COIL_MAKE_MODEL, COIL_CLI and MPIEXEC set.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const COIL_SERVE = env("COIL_SERVE");
const COIL_CLI = env("COIL_CLI");
const MPIEXEC = env("MPIEXEC");

const work = mkdtempSync(join(tmpdir(), "coil-openai-"));
const modelDir = join(work, "tiny");
// The tiny shape with a vocabulary that covers the GPT-NeoX tokenizer, so text prompts work.
const made = spawnSync(env("COIL_MAKE_MODEL"), ["--shape", "tiny", "--set", "vocab_size=50280", "--out", modelDir]);
if (made.status !== 0) throw new Error(`coil-make-model failed: ${made.stderr}`);
// A small chat template: each message as "<|role|>\n" + trimmed content + "\n".
const templatePath = join(work, "chat.jinja");
writeFileSync(templatePath,
  "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] | trim + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}\n");
const renderByHand = (messages, addGenerationPrompt = true) =>
  messages.map((m) => `<|${m.role}|>\n${m.content.trim()}\n`).join("") + (addGenerationPrompt ? "<|assistant|>\n" : "");

after(() => rmSync(work, { recursive: true, force: true }));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The child of `parent` whose environment has OMPI_COMM_WORLD_RANK=0 (coil-serve's rank 0).
function rankZeroOf(parent) {
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) !== parent) continue;
      if (readFileSync(`/proc/${name}/environ`, "latin1").includes("OMPI_COMM_WORLD_RANK=0\0")) return Number(name);
    } catch {}
  }
  return null;
}

async function startServer(ranks, flags = []) {
  const dir = mkdtempSync(join(work, "server-"));
  const portFile = join(dir, "ports");
  const serve = [COIL_SERVE, "--model", modelDir, "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
    "--http-port", "0", "--port-file", portFile, "--threads", "1", "--chat-template", templatePath,
    "--served-model-name", "tiny", ...flags];
  const argv = ranks === 1 ? serve
    : [MPIEXEC, "-np", String(ranks), "--oversubscribe", "--allow-run-as-root", "--mca", "odls_base_sigkill_timeout", "40", ...serve];
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  child.stdout.on("data", (d) => { log += d; });
  child.stderr.on("data", (d) => { log += d; });
  let exited = null;
  const done = new Promise((resolve) => child.on("exit", (code) => { exited = code; resolve(code); }));
  const deadline = Date.now() + 120_000;
  let ports = null;
  while (!ports) {
    if (exited !== null) throw new Error(`coil-serve exited with ${exited} before serving:\n${log}`);
    if (Date.now() > deadline) throw new Error(`coil-serve did not listen within 120 s:\n${log}`);
    if (existsSync(portFile)) {
      const lines = readFileSync(portFile, "utf8").trim().split("\n");
      if (lines.length >= 3) ports = lines.map(Number);
    }
    await sleep(50);
  }
  const [grpc, metrics, http] = ports;
  const server = {
    grpc, metrics, http, done,
    log: () => log,
    baseURL: `http://127.0.0.1:${http}/v1`,
    client: new OpenAI({ baseURL: `http://127.0.0.1:${http}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60_000 }),
    signal(sig) {
      const target = ranks === 1 ? child.pid : rankZeroOf(child.pid);
      if (target) process.kill(target, sig);
    },
    async stop() {
      if (exited !== null) return exited;
      server.signal("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      const code = await done;
      clearTimeout(timer);
      return code;
    },
  };
  return server;
}

async function metric(server, name) {
  const text = await (await fetch(`http://127.0.0.1:${server.metrics}/metrics`)).text();
  const match = text.match(new RegExp(`^${name.replace(/[{}"=]/g, (c) => `\\${c}`)} (\\S+)$`, "m"));
  return match ? Number(match[1]) : NaN;
}

// Waits until every state row is free and nothing waits or runs.
async function expectAllRowsFree(server, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const free = await metric(server, "coil_state_rows_free");
    const used = await metric(server, "coil_state_rows_used");
    const running = await metric(server, "coil_requests_running");
    const waiting = await metric(server, "coil_requests_waiting");
    if (used === 0 && running === 0 && waiting === 0 && free > 0) return;
    if (Date.now() > deadline) assert.fail(`rows still held: free ${free}, used ${used}, running ${running}, waiting ${waiting}`);
    await sleep(50);
  }
}

function grpcText(server, args) {
  const run = spawnSync(COIL_CLI, ["--target", `127.0.0.1:${server.grpc}`, "generate", ...args], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout.replace(/\n$/, "");
}

async function expectApiError(promise, status, param) {
  await assert.rejects(promise, (error) => {
    assert.equal(error.status, status, `status of ${error.message}`);
    if (param !== undefined) assert.equal(error.param, param);
    assert.ok(error.error?.message?.length > 0, "the error object has a message");
    return true;
  });
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

for (const ranks of [1, 2]) {
  describe(`TP${ranks}`, () => {
    let server;
    before(async () => { server = await startServer(ranks, ["--state-rows", "4", "--max-model-len", "8192"]); });
    after(async () => { assert.equal(await server.stop(), 0, server.log()); });

    test("GET /v1/models and /health", async () => {
      const models = await server.client.models.list();
      assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);
      const health = await fetch(`http://127.0.0.1:${server.http}/health`);
      assert.equal(health.status, 200);
    });

    test("greedy completion equals the gRPC output, streamed or not", async () => {
      const prompt = "The capital of France is";
      const completion = await server.client.completions.create({ model: "tiny", prompt, max_tokens: 12, temperature: 0, ignore_eos: true });
      assert.equal(completion.object, "text_completion");
      assert.equal(completion.choices.length, 1);
      assert.equal(completion.choices[0].finish_reason, "length");
      assert.equal(completion.usage.completion_tokens, 12);
      assert.equal(completion.usage.total_tokens, completion.usage.prompt_tokens + 12);
      const viaGrpc = grpcText(server, [prompt, "--max_tokens", "12", "--ignore_eos"]);
      assert.equal(completion.choices[0].text, viaGrpc);

      const chunks = await collect(await server.client.completions.create({
        model: "tiny", prompt, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
      const streamed = chunks.flatMap((c) => c.choices.map((choice) => choice.text)).join("");
      assert.equal(streamed, viaGrpc);
      const finishes = chunks.flatMap((c) => c.choices.map((choice) => choice.finish_reason)).filter((r) => r);
      assert.deepEqual(finishes, ["length"]);
      assert.equal(chunks.at(-1).usage.completion_tokens, 12);
      assert.deepEqual(chunks.at(-1).choices, []);
    });

    test("return_token_ids gives the generated ids, streamed and not, as the gRPC API does", async () => {
      const prompt = "The capital of France is";
      const viaGrpc = grpcText(server, [prompt, "--max_tokens", "10", "--ignore_eos", "--print_ids"])
        .split(",").map(Number);
      assert.equal(viaGrpc.length, 10);
      const completion = await server.client.completions.create({
        model: "tiny", prompt, max_tokens: 10, temperature: 0, ignore_eos: true, return_token_ids: true });
      assert.deepEqual(completion.choices[0].token_ids, viaGrpc);
      const chunks = await collect(await server.client.completions.create({
        model: "tiny", prompt, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true, return_token_ids: true }));
      assert.deepEqual(chunks.flatMap((c) => c.choices.flatMap((choice) => choice.token_ids)), viaGrpc);
      const plain = await server.client.completions.create({ model: "tiny", prompt, max_tokens: 2, temperature: 0 });
      assert.equal(plain.choices[0].token_ids, undefined);
    });

    test("token-id prompts, a list of prompts and echo", async () => {
      const ids = [101, 2023, 318, 257];
      const byIds = await server.client.completions.create({ model: "tiny", prompt: ids, max_tokens: 6, temperature: 0, ignore_eos: true });
      assert.equal(byIds.choices[0].text, grpcText(server, ["--ids", ids.join(","), "--max_tokens", "6", "--ignore_eos"]));
      assert.equal(byIds.usage.prompt_tokens, 4);
      const two = await server.client.completions.create({ model: "tiny", prompt: ["one", "two"], max_tokens: 3, temperature: 0, ignore_eos: true });
      assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
      const single = await server.client.completions.create({ model: "tiny", prompt: "two", max_tokens: 3, temperature: 0, ignore_eos: true });
      assert.equal(two.choices[1].text, single.choices[0].text);
      const echoed = await server.client.completions.create({ model: "tiny", prompt: "two", max_tokens: 3, temperature: 0, ignore_eos: true, echo: true });
      assert.equal(echoed.choices[0].text, "two" + single.choices[0].text);
    });

    test("usage counts the prompt tokens resumed from the prefix cache", async () => {
      // 25 token ids no other test sends: the first request computes them all and leaves a
      // snapshot at 24 (the tiny model's chunk is 8); the same prompt again resumes there.
      const ids = Array.from({ length: 25 }, (_, i) => 30000 + ranks * 100 + i);
      const request = { model: "tiny", prompt: ids, max_tokens: 6, temperature: 0, ignore_eos: true };
      const cold = await server.client.completions.create(request);
      assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
      const warm = await server.client.completions.create(request);
      assert.equal(warm.usage.prompt_tokens_details.cached_tokens, 24);
      assert.equal(warm.usage.prompt_tokens, 25);
      assert.equal(warm.choices[0].text, cold.choices[0].text);
    });

    test("chat completion equals the completion of the rendered template, streamed or not", async () => {
      const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "  Hello there \n" }];
      const chat = await server.client.chat.completions.create({ model: "tiny", messages, max_completion_tokens: 10, temperature: 0, ignore_eos: true });
      assert.equal(chat.object, "chat.completion");
      assert.equal(chat.choices[0].message.role, "assistant");
      assert.equal(chat.choices[0].finish_reason, "length");
      const plain = await server.client.completions.create({ model: "tiny", prompt: renderByHand(messages), max_tokens: 10, temperature: 0, ignore_eos: true });
      assert.equal(chat.choices[0].message.content, plain.choices[0].text);
      assert.equal(chat.usage.prompt_tokens, plain.usage.prompt_tokens);

      const chunks = await collect(await server.client.chat.completions.create({ model: "tiny", messages, max_tokens: 10, temperature: 0, ignore_eos: true, stream: true }));
      assert.equal(chunks[0].choices[0].delta.role, "assistant");
      assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join(""), plain.choices[0].text);
      assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
    });

    test("stop ends the text before the stop string", async () => {
      const request = { model: "tiny", prompt: "Once upon a time", max_tokens: 24, temperature: 0, ignore_eos: true };
      const full = (await server.client.completions.create(request)).choices[0].text;
      // A stop string taken from the middle of the unstopped output.
      const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 3);
      assert.ok(stop.length > 0, `output too short: ${JSON.stringify(full)}`);
      const stopped = await server.client.completions.create({ ...request, stop: [stop] });
      assert.equal(stopped.choices[0].text, full.slice(0, full.indexOf(stop)));
      assert.equal(stopped.choices[0].finish_reason, "stop");
      assert.equal(stopped.choices[0].stop_reason, stop);
    });

    test("the same seed gives the same text; n gives several choices", async () => {
      const request = { model: "tiny", prompt: "Random words:", max_tokens: 16, temperature: 1.0, seed: 1234, ignore_eos: true };
      const a = await server.client.completions.create(request);
      const b = await server.client.completions.create(request);
      assert.equal(a.choices[0].text, b.choices[0].text);
      const several = await server.client.completions.create({ ...request, n: 3 });
      assert.deepEqual(several.choices.map((c) => c.index), [0, 1, 2]);
      assert.equal(several.choices[0].text, a.choices[0].text, "choice 0 uses the request's seed");
      assert.equal(several.usage.completion_tokens, 48);
      const greedy = await server.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "hi" }], n: 2, max_tokens: 5, temperature: 0, ignore_eos: true });
      assert.equal(greedy.choices.length, 2);
      assert.equal(greedy.choices[0].message.content, greedy.choices[1].message.content);
    });

    test("logprobs", async () => {
      const completion = await server.client.completions.create({ model: "tiny", prompt: "Hello", max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: 3 });
      const lp = completion.choices[0].logprobs;
      assert.equal(lp.tokens.length, 5);
      assert.equal(lp.tokens.join(""), completion.choices[0].text);
      for (let i = 0; i < 5; ++i) {
        const alternatives = Object.values(lp.top_logprobs[i]);
        assert.ok(alternatives.length >= 1 && alternatives.length <= 3);
        // Greedy: the sampled token is the most likely one.
        assert.ok(Math.abs(lp.token_logprobs[i] - Math.max(...alternatives)) < 1e-5);
        assert.ok(lp.token_logprobs[i] <= 0);
      }
      const chat = await server.client.chat.completions.create({ model: "tiny", messages: [{ role: "user", content: "Hello" }], max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 });
      const content = chat.choices[0].logprobs.content;
      assert.equal(content.length, 4);
      assert.equal(content.map((c) => c.token).join(""), chat.choices[0].message.content);
      for (const entry of content) {
        assert.equal(entry.top_logprobs.length, 2);
        assert.ok(Math.abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-5);
        assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, "utf8")]);
      }
    });

    test("bad requests get OpenAI error objects naming the parameter", async () => {
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", temperature: "hot" }), 400, "temperature");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", max_tokens: 0 }), 400, "max_tokens");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", top_p: 1.5 }), 400, "top_p");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", n: 1000 }), 400, "n");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: [1, "a"] }), 400, "prompt");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: [999999] }), 400, "prompt");
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", logit_bias: { 5: 1 } }), 400, "logit_bias");
      await expectApiError(server.client.chat.completions.create({ model: "tiny", messages: [] }), 400, "messages");
      await expectApiError(server.client.chat.completions.create({ model: "tiny", messages: [{ content: "no role" }] }), 400, "messages");
      await expectApiError(server.client.completions.create({ model: "gpt-4o", prompt: "x" }), 404, "model");
      // Malformed JSON, a body that is not an object, an unknown path.
      for (const body of ["{\"prompt\": ", "[1, 2]"]) {
        const response = await fetch(`${server.baseURL}/completions`, { method: "POST", body, headers: { "content-type": "application/json" } });
        assert.equal(response.status, 400);
        assert.equal((await response.json()).error.type, "invalid_request_error");
      }
      const missing = await fetch(`${server.baseURL}/embeddings`, { method: "POST", body: "{}" });
      assert.equal(missing.status, 404);
      assert.equal((await missing.json()).error.code, "not_found");
      // A body over the limit (8 MiB by default).
      const huge = await fetch(`${server.baseURL}/completions`, { method: "POST", body: JSON.stringify({ prompt: "x".repeat(9 << 20) }) });
      assert.equal(huge.status, 413);
      assert.match((await huge.json()).error.message, /limit/);
      // Unknown parameters are ignored, and the response says which.
      const ignored = await fetch(`${server.baseURL}/completions`, { method: "POST", body: JSON.stringify({ prompt: "x", max_tokens: 2, store: true, metadata: {} }) });
      assert.equal(ignored.status, 200);
      assert.equal(ignored.headers.get("coil-ignored-parameters"), "store,metadata");
      await ignored.json();
      await expectAllRowsFree(server);
    });

    test("an aborted stream and a client that never reads free their rows", async () => {
      const cancelledBefore = await metric(server, 'coil_requests_failed_total{code="CANCELLED"}');
      const controller = new AbortController();
      const stream = await server.client.completions.create(
        { model: "tiny", prompt: "Go on", max_tokens: 7000, temperature: 0, ignore_eos: true, stream: true },
        { signal: controller.signal });
      let seen = 0;
      for await (const chunk of stream) {
        assert.equal(chunk.choices[0].finish_reason, null);
        if (++seen === 3) {
          controller.abort();
          break;
        }
      }
      await expectAllRowsFree(server);
      assert.equal(await metric(server, 'coil_requests_failed_total{code="CANCELLED"}'), cancelledBefore + 1);
    });
  });
}

describe("limits and drain", () => {
  test("a client that never reads its stream is dropped after the write timeout", async () => {
    const server = await startServer(1, ["--state-rows", "2", "--max-model-len", "1100000"]);
    try {
      // A million tokens of server-sent events (about 170 MB) cannot fit in the socket
      // buffers, nor be generated before they fill (about 4 MB) and the server's write
      // timeout (10 s) passes, however fast the machine: the request is cancelled.
      const socket = net.connect(server.http, "127.0.0.1");
      await new Promise((resolve) => socket.on("connect", resolve));
      socket.pause();
      const body = JSON.stringify({ prompt: "Go on", max_tokens: 1_000_000, temperature: 0, ignore_eos: true, stream: true });
      socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      await sleep(1000);
      assert.equal(await metric(server, "coil_requests_running"), 1);
      await expectAllRowsFree(server, 60_000);
      assert.equal(await metric(server, 'coil_requests_failed_total{code="CANCELLED"}'), 1);
      assert.ok(await metric(server, "coil_generated_tokens_total") < 1_000_000);
      socket.destroy();
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });

  test("a full queue answers 429 and a draining server 503", async () => {
    const server = await startServer(1, ["--state-rows", "1", "--max-queue", "1", "--max-model-len", "65536", "--drain-timeout", "2"]);
    try {
      const long = { model: "tiny", prompt: "x", max_tokens: 60000, temperature: 0, ignore_eos: true, stream: true };
      const running = await server.client.completions.create(long);
      const queued = await server.client.completions.create(long);
      await expectApiError(server.client.completions.create(long), 429);
      // SIGTERM: health and new requests answer 503 while the others drain.
      server.signal("SIGTERM");
      await sleep(300);
      const health = await fetch(`http://127.0.0.1:${server.http}/health`);
      assert.equal(health.status, 503);
      await expectApiError(server.client.completions.create({ model: "tiny", prompt: "x", max_tokens: 2 }), 503);
      // Cut by the drain timeout: each stream ends with a service_unavailable error event
      // (gRPC's UNAVAILABLE), so that a client may retry it elsewhere.
      for (const stream of [running, queued]) {
        await assert.rejects(collect(stream), (error) => {
          assert.equal(error.error?.type, "service_unavailable", error.message);
          assert.match(error.message, /drain timeout/);
          return true;
        });
      }
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });
});
