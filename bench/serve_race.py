"""Benchmark 43 of bench/run.py: `ppc serve` under 16 concurrent clients against `ppc generate`.

Issue #43's target: the decode benchmark's LLaMA (bench/decode_race.py's
program for b = 8, P = 64, N = 64) split into 2 stages on 2 ranks, once as
`ppc generate` of its 16 prompts (tokens/s by its own total_ms, as benchmark
42 times it) and once behind `ppc serve`, with 16 clients (threads, Python's
http.client) that each stream one of the prompts at the same moment. The
service's figure is 16 N over the time from the first request sent to the
last [DONE]; its time to first token is each client's, from its request to
its first event, reported as p50 and p99. Both run with one thread per rank.
In interleaved rounds; the service's tokens are checked equal to
generate's.
"""
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import threading
import time

import decode_race

# bench/run.py's module; run.py assigns it before calling bench_serve().
R = None

P, N, B, CLIENTS = 64, 64, 8, 16


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def bench_serve(cfg):
    decode_race.R = R
    python = decode_race.make_programs(cfg, [B], [[P, N]])
    manifest = R.split(os.path.join(R.MODELS, "prefill.b%d.pt2" % B),
                       os.path.join(R.WORK, "serve.b%d.2" % B), "--stages", 2)
    prompt_path = os.path.join(R.MODELS, "prefill.P%d.pt" % P)
    prompts = json.loads(R.sh([python, "-c", "import json, sys, torch; "
                               "print(json.dumps(torch.load(sys.argv[1]).tolist()))",
                               prompt_path]).out)

    def generate():
        out, js = (os.path.join(R.WORK, "serve.generate.%s" % x) for x in ("out.pt", "json"))
        if os.path.exists(js):
            os.remove(js)
        R.sh(R.launch(2, "generate", manifest, "--prompt", prompt_path, "--max-new-tokens", N,
                      "--output", out, "--threads", 1, "--stats-json", js), timeout=1200)
        with open(js) as f:
            st = json.load(f)
        tokens = json.loads(R.sh([python, "-c", "import json, sys, torch; "
                                  "print(json.dumps(torch.load(sys.argv[1]).tolist()))",
                                  out]).out)
        return {"tps": st["tokens_per_second"], "first_s": st["first_token_ms"] / 1000,
                "tokens": tokens}

    def serve():
        cmd = R.launch(2, "serve", manifest, "--port", 0, "--threads", 1, "--quiet")
        proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=R.ENV)
        port = None
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                m = re.search(r"serving on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    port = int(m.group(1))
                    break
            if port is None:
                raise RuntimeError("ppc serve did not start: " + "".join(lines[-5:]))
            drain = threading.Thread(target=lambda: [lines.append(x) for x in proc.stdout],
                                     daemon=True)
            drain.start()
            results = [None] * CLIENTS
            go = threading.Barrier(CLIENTS + 1)

            def client(i):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
                c.connect()
                go.wait()
                sent = time.monotonic()
                c.request("POST", "/v1/completions",
                          json.dumps({"prompt": prompts[i], "max_tokens": N, "stream": True}))
                r = c.getresponse()
                first, tokens = None, []
                for raw in r:
                    line = raw.decode().strip()
                    if line == "data: [DONE]":
                        break
                    if line.startswith("data: "):
                        if first is None:
                            first = time.monotonic() - sent
                        tokens += json.loads(line[6:])["choices"][0]["token_ids"]
                results[i] = (first, time.monotonic(), tokens)
                c.close()

            threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
            for t in threads:
                t.start()
            go.wait()
            start = time.monotonic()
            for t in threads:
                t.join(600)
            if any(r is None for r in results):
                raise RuntimeError("a client got no answer: " + "".join(lines[-5:]))
            end = max(r[1] for r in results)
            firsts = [r[0] for r in results]
            return {"tps": CLIENTS * N / (end - start), "ttft_p50": percentile(firsts, 0.5),
                    "ttft_p99": percentile(firsts, 0.99), "tokens": [r[2] for r in results]}
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    runs = R.rounds({"generate": generate, "serve": serve}, cfg.get("decode_race_reps", 3))
    same = all(s["tokens"] == g["tokens"] for s in runs["serve"] for g in runs["generate"])
    mine = R.stats([x["tps"] for x in runs["serve"]])
    theirs = R.stats([x["tps"] for x in runs["generate"]])
    ratio = mine["median"] / theirs["median"]
    return [R.row(
        "43 serve", "LLaMA 8×512, %d clients each streaming one prompt (P=%d, N=%d) through "
        "ppc serve, 2 stages on 2 ranks, b=%d" % (CLIENTS, P, N, B),
        mine, "tokens/s", "ppc generate of the same %d prompts, 2 ranks, b=%d (its total_ms)"
        % (CLIENTS, B), theirs, ratio, ">= 0.9x", ratio >= 0.9,
        "time to first token under that load: p50 %.3f s, p99 %.3f s (generate's first token "
        "%.3f s); tokens %s generate's" % (
            statistics.median(x["ttft_p50"] for x in runs["serve"]),
            statistics.median(x["ttft_p99"] for x in runs["serve"]),
            statistics.median(x["first_s"] for x in runs["generate"]),
            "equal to" if same else "DIFFER from"),
        runs={"serve": [dict(x, tokens=None) for x in runs["serve"]],
              "generate": [dict(x, tokens=None) for x in runs["generate"]]})]
