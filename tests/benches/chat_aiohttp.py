"""The chat benchmark's rows as a Python partner backend sees them: aiohttp, one ClientSession
with its default connection pool (connections kept alive) or with a new connection per request,
first token read at the client.

Driven by `chat_stream.rs`, which starts the service and the scripted upstream; it sends one
job as JSON on stdin and reads back, on stdout:
  `start` when the measured part begins (after the warm-up), `end` when it is over, then one
  JSON line: {"timings": {name: [[first, last, done, end], ...]}, "cpu_s": ...}
with times in seconds from each request's start, and this process's CPU over the measured part.

Jobs:
  {"mode": "sequential", "targets": [raw, path], "rounds": N, "warmup": N, "tokens": N}
      the targets one after the other, round by round, on the same session;
  {"mode": "concurrent", "targets": [t], "concurrency": N, "warmup_s": S, "duration_s": S,
   "tokens": N}
      N workers, each streaming the next answer as soon as the last one ended.
Every job also has "new_connections": false for the default pool, true for a connection closed
after each request. A target: {"name", "url", "headers", "body", "done"}; a body with a
"conversationId" gets the worker's own conversation.
"""

import asyncio
import json
import sys
import time

import aiohttp

TOKEN = b"tok "


def count_new(buf, old, pat):
    """Occurrences of `pat` in `buf` that end after the first `old` bytes."""
    start = max(old - (len(pat) - 1), 0)
    count, at = 0, buf.find(pat, start)
    while at != -1:
        count += 1
        at = buf.find(pat, at + 1)
    return count


async def stream(session, target, conversation, tokens):
    body = dict(target["body"])
    if "conversationId" in body:
        body["conversationId"] = conversation
    done_marker = target["done"].encode()
    start = time.perf_counter()
    first = last = done = None
    seen = 0
    buf = bytearray()
    async with session.post(target["url"], json=body, headers=target["headers"]) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{target['name']}: status {resp.status}: {await resp.text()}")
        async for chunk in resp.content.iter_any():
            old = len(buf)
            buf += chunk
            at = time.perf_counter() - start
            n = count_new(buf, old, TOKEN)
            if n:
                first = first if first is not None else at
                last = at
                seen += n
            if done is None and count_new(buf, old, done_marker):
                done = at
    end = time.perf_counter() - start
    if seen != tokens:
        raise RuntimeError(f"{target['name']}: {seen} tokens, expected {tokens}")
    return [first, last, done if done is not None else end, end]


class Window:
    """The measured part: marked on stdout (the driver reads the machine's counters there), with
    this process's CPU over it."""

    cpu_s = 0.0

    @classmethod
    def start(cls):
        print("start", flush=True)
        cls.cpu_s = time.process_time()

    @classmethod
    def end(cls):
        cls.cpu_s = time.process_time() - cls.cpu_s
        print("end", flush=True)


async def sequential(session, job):
    targets, tokens = job["targets"], job["tokens"]
    for _ in range(job["warmup"]):
        for t in targets:
            await stream(session, t, "ttfb", tokens)
    timings = {t["name"]: [] for t in targets}
    Window.start()
    for _ in range(job["rounds"]):
        for t in targets:
            timings[t["name"]].append(await stream(session, t, "ttfb", tokens))
    Window.end()
    return timings


async def load(session, target, concurrency, seconds, tokens):
    deadline = time.perf_counter() + seconds

    async def worker(i):
        out = []
        while time.perf_counter() < deadline:
            out.append(await stream(session, target, f"load-{i}", tokens))
        return out

    results = await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return [t for r in results for t in r]


async def concurrent(session, job):
    (target,) = job["targets"]
    n, tokens = job["concurrency"], job["tokens"]
    await load(session, target, n, job["warmup_s"], tokens)
    Window.start()
    timings = await load(session, target, n, job["duration_s"], tokens)
    Window.end()
    return {target["name"]: timings}


async def main():
    job = json.load(sys.stdin)
    run = {"sequential": sequential, "concurrent": concurrent}[job["mode"]]
    # The default connector keeps up to 100 connections alive between requests.
    connector = aiohttp.TCPConnector(force_close=job["new_connections"])
    async with aiohttp.ClientSession(connector=connector) as session:
        timings = await run(session, job)
    print(json.dumps({"timings": timings, "cpu_s": Window.cpu_s}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
