"""A bounded load test of `ltrr serve` on the demo router, side by side with in-process routing.

Starts the server in this process (uvicorn in a thread, 127.0.0.1, the demo's generator behind
its cache), then:

- ``/v1/route``: N requests at concurrency C (default 200 at 8): p50 and p99 latency, throughput,
  server errors, beside in-process `RoutedPipeline.route()` on the same questions (run first, one
  at a time). The two latencies are not like for like: a server request shares the machine with
  C - 1 others, so its latency is about C / throughput (Little's law), mostly the wait for the
  others; ``p50_ratio_to_in_process`` is that ratio. The cost of a request to the server is
  better read from its inverse throughput, ``seconds_per_request`` (1 / throughput: the machine
  time one request takes with C in flight), and ``seconds_per_request_over_in_process_p50``;
- ``/v1/chat/completions``: M requests at concurrency 4 (default 30): latency and the queue wait
  the server reports per request.

Peak RSS is this process's (server, models and client together).

    python benchmarks/serve_load.py [--route N] [--chat M]

Needs `ltrr run demo` first. Writes ``benchmarks/results/serve_load.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "serve_load.json"
MODEL = "runs/demo/models/lambdamart-listwise"


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(argv=None) -> int:
    import httpx
    import uvicorn

    from ltrr.config import load_config
    from ltrr.data.io import write_text_atomic
    from ltrr.pipeline import Run
    from ltrr.progress import configure
    from ltrr.routers.ltr import LTRRouter
    from ltrr.routers.pipeline import RoutedPipeline
    from ltrr.serve import RoutedRAG, ServeSettings, create_app

    ap = argparse.ArgumentParser()
    ap.add_argument("--route", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--chat", type=int, default=30)
    args = ap.parse_args(argv)
    configure()
    run = Run(load_config("demo"))
    questions = run.dataset.queries["question"].astype(str).tolist()
    qs = [questions[i % len(questions)] for i in range(args.route)]
    res: dict = {}

    pipe = RoutedPipeline.from_router(LTRRouter.load(MODEL))  # the pool loaded once, as the server does
    pipe.route(qs[0])  # warm
    t = []
    for q in qs:
        t0 = time.perf_counter()
        pipe.route(q)
        t.append(time.perf_counter() - t0)
    res["in_process_route"] = {"n": len(t), "p50_s": _pct(t, 50), "p99_s": _pct(t, 99)}

    service = RoutedRAG(MODEL, generator=run.make_generator(), template=run.config.generation["template"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service, ServeSettings(max_queue=64, timeout_s=600)),
                                           host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/v1"
    client = httpx.Client(timeout=600)
    client.post(url + "/route", json={"model": "ltrr", "question": qs[0]})  # warm

    def route(q):
        t0 = time.perf_counter()
        r = client.post(url + "/route", json={"model": "ltrr", "question": q})
        return time.perf_counter() - t0, r.status_code

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as ex:
        out = list(ex.map(route, qs))
    wall = time.perf_counter() - t0
    lat = [x for x, _ in out]
    res["v1_route"] = {"n": len(out), "concurrency": args.concurrency, "p50_s": _pct(lat, 50), "p99_s": _pct(lat, 99),
                       "throughput_rps": len(out) / wall, "server_errors": sum(c >= 500 for _, c in out),
                       "non_200": sum(c != 200 for _, c in out)}
    res["v1_route"]["p50_ratio_to_in_process"] = res["v1_route"]["p50_s"] / res["in_process_route"]["p50_s"]
    res["v1_route"]["seconds_per_request"] = wall / len(out)
    res["v1_route"]["seconds_per_request_over_in_process_p50"] = (
        res["v1_route"]["seconds_per_request"] / res["in_process_route"]["p50_s"])
    res["v1_route"]["note"] = (
        f"p50_ratio_to_in_process sets {args.concurrency} requests in flight against one at a time: the server "
        "p50 is mostly the wait for the others (about concurrency / throughput); seconds_per_request "
        "(1 / throughput) is a request's cost to the server")

    def chat(q):
        t0 = time.perf_counter()
        r = client.post(url + "/chat/completions", json={"model": "ltrr", "messages": [{"role": "user", "content": q}]})
        body = r.json()
        return time.perf_counter() - t0, r.status_code, body.get("ltrr", {}).get("queue_wait_s")

    if args.chat:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as ex:
            out = list(ex.map(chat, qs[: args.chat]))
        wall = time.perf_counter() - t0
        lat = [x for x, _, _ in out]
        waits = [w for _, _, w in out if w is not None]
        res["v1_chat"] = {"n": len(out), "concurrency": 4, "p50_s": _pct(lat, 50), "p99_s": _pct(lat, 99),
                          "throughput_rps": len(out) / wall, "server_errors": sum(c >= 500 for _, c, _ in out),
                          "queue_wait_p50_s": statistics.median(waits) if waits else None,
                          "queue_wait_max_s": max(waits) if waits else None}
    # ru_maxrss is in kB on Linux and in bytes on macOS
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)
    server.should_exit = True
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(OUT, json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
