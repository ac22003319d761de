"""Instructions the server executes per streamed chat, counted by callgrind.

Wall-clock CPU on a shared 2-core machine moves by tens of percent between runs; instruction
counts do not. This starts SERVER_BIN under `valgrind --tool=callgrind` on a fresh database of
DATABASE_URL's server, against a scripted OpenAI-compatible upstream streaming TOKENS tokens
(and, for the traced modes, an OTLP sink that answers at once), warms up, then zeroes the
counters around CHATS admin chats and CHATS external chats on one kept-alive connection, and
prints instructions per chat for traces off, on and sampled at 10%. All threads of the server
are counted, the kernel is not.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = int(os.environ.get("TOKENS", "50"))
CHATS = int(os.environ.get("CHATS", "200"))
WARMUP = 20


class Upstream(BaseHTTPRequestHandler):
    """Streams TOKENS chunks shaped like OpenAI's; answers non-streamed calls (titles) at once."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        if not body.get("stream"):
            out = json.dumps({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "A title"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2},
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def send(event):
            data = ("data: " + (event if isinstance(event, str) else json.dumps(event)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "bench"}
        for i in range(TOKENS):
            send({**base, "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]})
        send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 5, "completion_tokens": TOKENS}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes every export and answers at once."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


def serve(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def fresh_database(admin_url):
    name = "instr_" + uuid.uuid4().hex[:12]
    psql = os.environ.get("PSQL", "psql")
    subprocess.run([psql, "-X", "-q", admin_url, "-c", f"CREATE DATABASE {name}"], check=True)
    return admin_url.rsplit("/", 1)[0] + "/" + name


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path, body, headers):
        self.conn.request("POST", "/api" + path, json.dumps(body), {"content-type": "application/json", **headers})
        return self.conn.getresponse().read()

    def data(self, path, body, headers=None):
        return json.loads(self.post(path, body, headers or {}))["data"]


def measure(server_bin, upstream, extra_env, out_dir):
    port = free_port()
    env = {
        **os.environ, **extra_env,
        "PORT": str(port), "DATABASE_URL": fresh_database(os.environ["DATABASE_URL"]),
        "JWT_SECRET": "b" * 64, "ENCRYPTION_KEY": "A" * 43 + "=",
        "ADMIN_USERNAME": "admin", "ADMIN_PASSWORD": "bench-password",
        "STORAGE_BACKEND": "fs", "STORAGE_DIR": os.path.join(out_dir, "storage"), "QUEUE_BACKEND": "memory",
        "RUST_LOG": "warn",
        "RATE_LIMIT_USER_REQUESTS": "1000000", "RATE_LIMIT_APP_REQUESTS": "1000000",
    }
    out = os.path.join(out_dir, "callgrind.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", server_bin],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                probe.request("GET", "/health")
                if probe.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None, "the server exited"
            time.sleep(0.5)
        c = Client(port)
        admin = {"Svc-Auth": c.data("/user/login", {"username": "admin", "password": "bench-password"})["token"]}
        provider = c.data("/ai-model/provider", {"providerName": "Bench", "providerKey": "bench"}, admin)
        model = c.data("/ai-model/config", {
            "providerId": provider, "modelName": "bench", "modelKey": "bench", "modelType": "CHAT",
            "apiKey": "sk-bench", "apiEndpoint": upstream}, admin)
        agent = c.data("/agent", {"name": "Bench", "chatModelId": model}, admin)
        app = c.data("/app", {"appId": "bench", "appName": "bench app"}, admin)
        external = {"Svc-App-Id": "bench", "Svc-Token": app["token"]}
        paths = {
            "admin": (f"/agent/{agent}/chat", {"conversationId": "c", "content": "benchmark"}, admin),
            "external": ("/openapi/v1/agent/chat",
                         {"agentId": agent, "openId": "u", "conversationId": "c", "content": "benchmark"}, external),
        }
        counts = {}
        for label, (path, body, headers) in paths.items():
            for _ in range(WARMUP):
                assert b'"done"' in c.post(path, body, headers), f"{label}: a warm-up chat did not finish"
            subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
            for _ in range(CHATS):
                assert b'"done"' in c.post(path, body, headers), f"{label}: a chat did not finish"
            subprocess.run(["callgrind_control", "-d", label, str(server.pid)], check=True, capture_output=True)
            dumps = sorted(f for f in os.listdir(out_dir) if f.startswith("callgrind.out."))
            with open(os.path.join(out_dir, dumps[-1])) as f:
                total = next(int(line.split()[1]) for line in f if line.startswith("summary:"))
            counts[label] = total / CHATS
        return counts
    finally:
        server.kill()
        server.wait()


def main():
    server_bin = os.environ["SERVER_BIN"]
    upstream, sink = serve(Upstream), serve(Sink)
    modes = {
        "off": {},
        "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": sink},
        "sampled 10%": {"OTEL_EXPORTER_OTLP_ENDPOINT": sink, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                        "OTEL_TRACES_SAMPLER_ARG": "0.1"},
    }
    print(f"instructions per streamed chat ({TOKENS}-token answers, history of 20 messages, "
          f"{CHATS} chats after {WARMUP} of warm-up, callgrind)")
    print("| traces | admin chat | external chat |")
    print("|---|---|---|")
    for label, extra in modes.items():
        with tempfile.TemporaryDirectory() as out_dir:
            counts = measure(server_bin, upstream, extra, out_dir)
        print(f"| {label} | {counts['admin']:,.0f} | {counts['external']:,.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
