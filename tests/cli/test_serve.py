#!/usr/bin/python3
"""Tests `ppc serve`: a split decoder behind HTTP (docs/serve.md).

The decoder is tests/models/make_decoder_models.py's dec_llama_long (b = 2,
a cache of 512 positions, one token a step), split into 2 stages served by
2 ranks started without a launcher, so that the tests signal each rank
themselves; rank 1, the last stage's, serves HTTP. Clients are Python's
http.client. The skips are test_generate.py's (LibTorch 2.x and a Python
with transformers to export the decoder).

A ppc built against LibTorch 2.x must:
  - answer concurrent completions, streamed (server-sent events, then
    [DONE]) and not, with the tokens `ppc generate` gives for the same
    prompts and settings, greedy and sampled, one-row prompts included
    (padded to the batch); usage counts the tokens;
  - refuse each bad request with its status and a JSON error (malformed
    JSON 400, a body over --max-request-bytes 413, a missing prompt 400,
    an id outside the vocabulary 400, prompt plus max_tokens beyond the
    cache 400, more than --max-queue waiting 429, no or a wrong API key
    401) and answer a valid request afterwards;
  - cancel a streamed request whose client disconnects: the metrics count
    it cancelled and show no slot in use;
  - report /metrics in Prometheus' text format (read strictly here) and
    never print the API key;
  - serve docs/serve.md's Python client, run as written with a tokenizer
    of the model's ids: it prints the text of generate's tokens;
  - warn in one line when it listens beyond loopback without a key;
  - on SIGTERM, answer the requests taken, then end every rank with status
    0; when a rank is SIGKILLed, answer open requests with a 503 naming it
    and exit non-zero.

Env: PPC, PPC_BUILD_DIR, PPC_TORCH_PYTHON (the PyTorch 2.x build).
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BUILD, PPC, class_tmpdir, free_port, launch,  # noqa: E402
                    libtorch_major, main, pytorch2_python, rank_env, split, tmpdir)
import decoders  # noqa: E402

PT2_PYTHON = pytorch2_python()
DECODER_MODELS = os.path.join(BUILD, "decoder-models")
NAME = "dec_llama_long"
KEY = "test-key-5f0c2a9e"
N = 12  # new tokens of the compared requests
QUEUE = 8  # --max-queue: more than the concurrent test's 6 clients
TIMEOUT = 60


def skip_reason():
    if libtorch_major() < 2:
        return "needs a ppc built against LibTorch 2.x (decoders are .pt2 programs)"
    if not os.access(PT2_PYTHON, os.X_OK):
        return "no PyTorch 2.x to export the decoders: %s is missing" % PT2_PYTHON
    if not decoders.has_transformers(PT2_PYTHON):
        return "%s has no transformers to export the decoders" % PT2_PYTHON
    return None


class Service:
    """Two ranks of `ppc serve MANIFEST ARGS`; rank 1 serves HTTP. Their
    output is collected by threads (never a full pipe)."""

    def __init__(self, manifest, *args):
        port = free_port()
        cmd = [PPC, "serve", manifest, "--port", "0", "--timeout", str(TIMEOUT),
               *map(str, args)]
        self.procs = [subprocess.Popen(cmd, env=rank_env(rank, 2, port), text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                      for rank in range(2)]
        self.out = [[], []]
        self.err = [[], []]
        self.ready = threading.Event()
        self.port = None
        self.threads = []
        for rank, p in enumerate(self.procs):
            for stream, lines in ((p.stdout, self.out[rank]), (p.stderr, self.err[rank])):
                t = threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                t.start()
                self.threads.append(t)
        if not self.ready.wait(120):
            self.kill()
            raise AssertionError("the service did not start:\n" + self.text())
        if self.port is None:
            self.kill()
            raise AssertionError("the service ended before listening:\n" + self.text())

    def _read(self, stream, lines):
        for line in stream:
            lines.append(line)
            m = re.match(r"serving on http://[0-9.]+:(\d+)$", line.strip())
            if m:
                self.port = int(m.group(1))
                self.ready.set()
        self.ready.set()

    def text(self):
        return "".join("".join(x) for x in self.out + self.err)

    def wait_for_exit(self, timeout=120):
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        for t in self.threads:
            t.join(10)
        for p in self.procs:
            p.stdout.close()
            p.stderr.close()
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        if not self.procs[0].stdout.closed:
            self.wait_for_exit()

    def request(self, method, path, body=None, key=KEY, raw=None):
        """(status, parsed JSON or text) of one request."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        kind = r.getheader("Content-Type", "")
        return r.status, json.loads(text) if kind.startswith("application/json") else text

    def complete(self, body, key=KEY):
        return self.request("POST", "/v1/completions", body, key=key)

    def stream(self, body, key=KEY, stop_after=None):
        """A streamed completion: (per row, its token ids; per row, its
        finish reason; whether [DONE] came). With STOP_AFTER, the client
        closes the connection after that many events."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                  headers={"Authorization": "Bearer " + key})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type", "").startswith("text/event-stream")
        tokens, finish, done, events = {}, {}, False, 0
        for line in r:
            line = line.decode().strip()
            if not line:
                continue
            assert line.startswith("data: "), line
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            assert "error" not in event, event
            (choice,) = event["choices"]
            tokens.setdefault(choice["index"], []).extend(choice["token_ids"])
            if choice["finish_reason"]:
                finish[choice["index"]] = choice["finish_reason"]
            events += 1
            if stop_after and events >= stop_after:
                break
        c.close()
        return tokens, finish, done

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200, (status, text)
        return parse_prometheus(text)


def parse_prometheus(text):
    """A strict reader of Prometheus' text format: {(name, labels): value},
    every sample's family declared by # HELP and # TYPE first."""
    declared, samples = set(), {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? '
                        r'(\S+)$')
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# "):
            parts = line.split(" ", 3)
            assert parts[1] in ("HELP", "TYPE") and len(parts) >= 3, line
            if parts[1] == "TYPE":
                assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), line
                declared.add(parts[2])
            continue
        m = sample.match(line)
        assert m, "not a Prometheus sample line: %r" % line
        name = m.group(1)
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or family in declared, "undeclared: %r" % line
        samples[(name, m.group(2) or "")] = float(m.group(3))
    return samples


def split_decoder(tmp):
    """The decoder's models made (cached) and split into 2 stages under TMP;
    returns the manifest."""
    r = decoders.make_decoder_models(DECODER_MODELS, PT2_PYTHON)
    if r.returncode != 0:
        raise AssertionError("make_decoder_models.py:\n" + r.stdout + r.stderr)
    return split(decoders.model_file(DECODER_MODELS, NAME), os.path.join(tmp, "split"),
                 "--stages", 2).manifest


def prompt_rows():
    return decoders.load_prompt(DECODER_MODELS, NAME)[:8]


class SkippingTest(unittest.TestCase):
    """Each test skips (SkipTest in setUp: one ctest for the whole file)
    where the decoders cannot be made."""
    reason = None

    def setUp(self):
        if self.reason:
            raise unittest.SkipTest(self.reason)


class ServeTest(SkippingTest):
    @classmethod
    def setUpClass(cls):
        cls.service = None
        cls.reason = skip_reason()
        if cls.reason:
            return
        tmp = cls.tmp = class_tmpdir(cls)
        cls.manifest = split_decoder(tmp)
        # The references: `ppc generate` on the same prompts, greedy and
        # sampled.
        cls.greedy = cls.generate_reference(prompt_rows(), "greedy")
        cls.sampled = cls.generate_reference(prompt_rows()[:2], "sampled", "--temperature", 0.8,
                                             "--top-k", 20, "--seed", 5)
        keyfile = os.path.join(tmp, "key")
        with open(keyfile, "w") as f:
            f.write(KEY + "\n")
        cls.service = Service(cls.manifest, "--api-key-file", keyfile, "--max-queue", QUEUE,
                              "--max-request-bytes", 4096, "--eos-id", 0)

    @classmethod
    def generate_reference(cls, prompt, tag, *extra):
        path, out = (os.path.join(cls.tmp, "%s.%s.pt" % (tag, what)) for what in ("prompt", "out"))
        torch.save(prompt.clone(), path)
        r = launch(2, "generate", cls.manifest, "--prompt", path, "--max-new-tokens", N,
                   "--output", out, "--eos-id", 0, "--timeout", TIMEOUT, *extra, timeout=300)
        if r.returncode != 0:
            raise AssertionError(r.stdout + r.stderr)
        return torch.load(out).tolist()

    @classmethod
    def tearDownClass(cls):
        if cls.service:
            cls.service.kill()

    def reference_tokens(self, reference, row):
        """A row's reference tokens, up to and including its first eos (0)."""
        tokens = reference[row]
        return tokens[:tokens.index(0) + 1] if 0 in tokens else tokens

    def test_concurrent_requests_match_generate(self):
        rows = prompt_rows().tolist()
        results, errors = {}, []

        def client(i):
            try:
                if i < 4:  # two rows each, streamed every other one
                    body = {"prompt": rows[2 * i:2 * i + 2], "max_tokens": N}
                    if i % 2:
                        tokens, finish, done = self.service.stream(body)
                        assert done
                        results[i] = ([tokens[0], tokens[1]], [finish[0], finish[1]])
                    else:
                        status, reply = self.service.complete(body)
                        assert status == 200, reply
                        results[i] = ([c["token_ids"] for c in reply["choices"]],
                                      [c["finish_reason"] for c in reply["choices"]])
                        assert reply["usage"]["prompt_tokens"] == 10, reply
                        assert reply["usage"]["completion_tokens"] == sum(
                            map(len, results[i][0])), reply
                elif i == 4:  # one row: padded to the batch of 2
                    status, reply = self.service.complete({"prompt": rows[5], "max_tokens": N})
                    assert status == 200, reply
                    results[i] = ([reply["choices"][0]["token_ids"]],
                                  [reply["choices"][0]["finish_reason"]])
                else:  # sampled as generate --temperature 0.8 --top-k 20 --seed 5
                    tokens, finish, done = self.service.stream(
                        {"prompt": rows[:2], "max_tokens": N, "temperature": 0.8,
                         "top_k": 20, "seed": 5})
                    results[i] = ([tokens[0], tokens[1]], [finish[0], finish[1]])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((i, repr(e)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        for i in range(4):
            for r in range(2):
                want = self.reference_tokens(self.greedy, 2 * i + r)
                self.assertEqual(results[i][0][r], want, "request %d row %d" % (i, r))
                self.assertEqual(results[i][1][r], "stop" if want[-1] == 0 else "length")
        self.assertEqual(results[4][0][0], self.reference_tokens(self.greedy, 5))
        for r in range(2):
            self.assertEqual(results[5][0][r], self.reference_tokens(self.sampled, r),
                             "sampled row %d" % r)
        self.assertNotEqual(results[5][0], results[0][0])

    def test_bad_requests_get_their_status_and_a_json_error(self):
        s = self.service
        cases = [
            ("malformed JSON", dict(raw="{"), 400, "the body is not valid JSON"),
            ("nested too deep", dict(raw="[" * 3000), 400,
             "the body nests deeper than 16 levels"),
            ("over --max-request-bytes", dict(raw=json.dumps({"prompt": [1] * 2000})), 413,
             "the body is over 4096 bytes (--max-request-bytes)"),
            ("no prompt", dict(body={"max_tokens": 2}), 400, "'prompt' is missing"),
            ("outside the vocabulary", dict(body={"prompt": [1, 128]}), 400,
             "'prompt' has token id 128, outside the vocabulary 0..127"),
            ("beyond the cache", dict(body={"prompt": [1] * 10, "max_tokens": 503}), 400,
             "the prompt's 10 tokens and 503 new ones need 513 positions; the cache holds 512"),
            ("no key", dict(body={"prompt": [1]}, key=None), 401, "missing or wrong API key"),
            ("a wrong key", dict(body={"prompt": [1]}, key=KEY + "x"), 401,
             "missing or wrong API key"),
        ]
        for what, kwargs, status, message in cases:
            with self.subTest(what):
                got, reply = s.request("POST", "/v1/completions", **kwargs)
                self.assertEqual(got, status, reply)
                self.assertIsInstance(reply, dict, reply)
                self.assertTrue(reply["error"]["message"].startswith(message), reply)
        status, reply = s.complete({"prompt": prompt_rows()[0].tolist(), "max_tokens": 3})
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["choices"][0]["token_ids"], self.reference_tokens(self.greedy,
                                                                                 0)[:3])

    def test_full_queue_gets_429(self):
        # One long stream holds a round; QUEUE requests wait (--max-queue);
        # one more is refused with 429. Then every request is answered.
        s = self.service
        first = threading.Event()
        long_done = []

        def long_stream():
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
            c.request("POST", "/v1/completions", headers={"Authorization": "Bearer " + KEY},
                      body=json.dumps({"prompt": [1, 2], "max_tokens": 300, "stream": True}))
            r = c.getresponse()
            for line in r:
                if line.startswith(b"data: {"):
                    first.set()
                if line.startswith(b"data: [DONE]"):
                    long_done.append(True)
            c.close()

        threads = [threading.Thread(target=long_stream)]
        threads[0].start()
        self.assertTrue(first.wait(60))
        statuses = []
        for _ in range(QUEUE):
            t = threading.Thread(target=lambda: statuses.append(
                s.complete({"prompt": [3, 4], "max_tokens": 2})[0]))
            t.start()
            threads.append(t)
        deadline = time.monotonic() + 30
        while s.metrics()[("ppc_queue_depth", "")] < QUEUE and time.monotonic() < deadline:
            time.sleep(0.05)
        status, reply = s.complete({"prompt": [5, 6], "max_tokens": 2})
        self.assertEqual(status, 429, reply)
        self.assertIn("requests are waiting already (--max-queue)", reply["error"]["message"])
        for t in threads:
            t.join(120)
        self.assertEqual((statuses, long_done), ([200] * QUEUE, [True]))

    def test_disconnect_cancels_and_frees_the_slot(self):
        s = self.service
        before = s.metrics()[("ppc_requests_total", '{outcome="cancelled"}')]
        tokens, _, done = s.stream({"prompt": [7, 8, 9], "max_tokens": 400}, stop_after=2)
        self.assertFalse(done)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = s.metrics()
            if m[("ppc_requests_total", '{outcome="cancelled"}')] > before:
                break
            time.sleep(0.1)
        self.assertEqual(m[("ppc_requests_total", '{outcome="cancelled"}')], before + 1)
        self.assertEqual(m[("ppc_slots_in_use", "")], 0)

    def test_metrics_are_prometheus_text_and_need_the_key(self):
        s = self.service
        s.complete({"prompt": [1, 2, 3], "max_tokens": 2})
        m = s.metrics()
        for name in ("ppc_prompt_tokens_total", "ppc_generated_tokens_total",
                     "ppc_time_to_first_token_seconds_count",
                     "ppc_time_per_token_seconds_count", "ppc_queue_depth",
                     "ppc_slots_in_use"):
            self.assertIn((name, ""), m)
        self.assertGreaterEqual(m[("ppc_requests_total", '{outcome="ok"}')], 1)
        self.assertGreaterEqual(m[("ppc_time_to_first_token_seconds_count", "")], 1)
        status, _ = s.request("GET", "/metrics", key=None)
        self.assertEqual(status, 401)
        status, reply = s.request("GET", "/health", key=None)
        self.assertEqual((status, reply), (200, {"status": "ok"}))
        self.assertNotIn(KEY, s.text())


# A word-level tokenizer of the decoders' 128 ids ("w000" .. "w127", none a
# prefix of another), saved as save_pretrained writes it: what docs/serve.md's
# client loads. Then the text of ids: `TOKENIZER DIR ID ...` prints it.
TOKENIZER = r"""
import os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
if not os.path.exists(sys.argv[1]):
    tok = Tokenizer(models.WordLevel({"w%03d" % i: i for i in range(128)}, unk_token="w000"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w000").save_pretrained(sys.argv[1])
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(tok.decode([int(i) for i in sys.argv[2:]], skip_special_tokens=True))
"""


def docs_client():
    """The Python block under docs/serve.md's "A Python client"."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                           "serve.md")) as f:
        text = f.read()
    return text.split("## A Python client", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


class ServeFaultsTest(SkippingTest):
    """Tests that start a service of their own (no API key)."""

    @classmethod
    def setUpClass(cls):
        cls.reason = skip_reason()
        if cls.reason:
            return
        cls.manifest = split_decoder(class_tmpdir(cls))

    def start_requests(self, service, count, max_tokens):
        """COUNT non-streamed requests in threads, once one token of the
        first has been picked; returns (threads, results)."""
        results = []

        def client(i):
            try:
                results.append(service.request(
                    "POST", "/v1/completions", {"prompt": [1 + i, 2], "max_tokens": max_tokens},
                    key=None))
            except Exception as e:  # noqa: BLE001 - reported by the caller
                results.append((None, repr(e)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if service.metrics()[("ppc_time_to_first_token_seconds_count", "")] > 0:
                break
            time.sleep(0.05)
        return threads, results

    def test_sigterm_answers_requests_taken_then_exits(self):
        # On every address, without a key: warned about in one line.
        service = Service(self.manifest, "--host", "0.0.0.0")
        self.addCleanup(service.kill)
        threads, results = self.start_requests(service, 3, 60)
        for p in service.procs:
            p.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        codes = service.wait_for_exit()
        self.assertEqual(codes, [0, 0], service.text())
        self.assertEqual(len(results), 3, results)
        for status, reply in results:
            self.assertEqual(status, 200, reply)
            self.assertEqual(len(reply["choices"][0]["token_ids"]), 60, reply)
        self.assertIn("ppc serve: stopping", service.text())
        self.assertEqual([l for l in service.err[1] if l.startswith("warning:")],
                         ["warning: serving on 0.0.0.0 without --api-key-file: anyone who "
                          "reaches this port can use the model\n"])

    def test_docs_client_prints_the_text(self):
        # docs/serve.md's client, as written, with a tokenizer of the model's
        # ids: it streams a completion and prints the text of generate's
        # tokens for the same prompt.
        tmp = tmpdir(self)
        tokenizer, client = os.path.join(tmp, "tokenizer"), os.path.join(tmp, "client.py")
        with open(client, "w") as f:
            f.write(docs_client())
        prompt = prompt_rows()[:2]
        path, out = os.path.join(tmp, "prompt.pt"), os.path.join(tmp, "tokens.pt")
        torch.save(prompt.clone(), path)
        r = launch(2, "generate", self.manifest, "--prompt", path, "--max-new-tokens", 64,
                   "--output", out, "--timeout", TIMEOUT, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        texts = []
        for ids in (prompt[0].tolist(), torch.load(out)[0].tolist()):
            r = subprocess.run([PT2_PYTHON, "-c", TOKENIZER, tokenizer, *map(str, ids)],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            texts.append(r.stdout.rstrip("\n"))
        text, want = texts
        self.assertEqual(len(text.split()), 5, text)
        service = Service(self.manifest)
        self.addCleanup(service.kill)
        r = subprocess.run([PT2_PYTHON, client, tokenizer, text, str(service.port)],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The text is redrawn on one line ("\r", which text mode reads as a
        # line break) as tokens come: the last is the whole answer.
        lines = r.stdout.splitlines()
        self.assertGreater(len(lines), 1, r.stdout)
        self.assertEqual(lines[-1], want)

    def test_killed_rank_gives_503_naming_it(self):
        service = Service(self.manifest)
        self.addCleanup(service.kill)
        threads, results = self.start_requests(service, 2, 400)
        service.procs[0].send_signal(signal.SIGKILL)
        for t in threads:
            t.join(120)
        codes = service.wait_for_exit()
        self.assertNotEqual(codes[1], 0, service.text())
        self.assertEqual(len(results), 2, results)
        for status, reply in results:
            self.assertEqual(status, 503, reply)
            self.assertRegex(reply["error"]["message"], r"^lost rank 0 \(", reply)


if __name__ == "__main__":
    main()
