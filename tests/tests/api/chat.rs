//! Agent chat: the stream, the tool loop, failures, disconnects, attachments, history,
//! conversations and analytics.

use std::time::Duration;

use chrono::Timelike;

use api_tests::chat::{joined, kinds, ndjson, say, ChatReply, ChatSetup};
use api_tests::PNG;
use futures::StreamExt;
use serde_json::{json, Value};

const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";

async fn messages(s: &ChatSetup, token: &str, agent: i64, conversation: &str) -> Vec<Value> {
    let r = s
        .app
        .get(
            &format!("/agent/{agent}/conversation/{conversation}/messages"),
            Some(token),
        )
        .await;
    r.assert_ok().as_array().unwrap().clone()
}

#[tokio::test]
async fn a_chat_streams_thinking_then_text_then_done_and_stores_both_messages() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-think", json!({})).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Thinker", "chatModelId": model, "instruction": "Be kind." }),
        )
        .await;

    let events = s.chat(&alice, agent, say("c-1", "hello there")).await.events();
    let k = kinds(&events);
    let first_text = k.iter().position(|k| k == "text").unwrap();
    assert!(
        k[..first_text].iter().all(|k| k == "thinking") && first_text > 0,
        "{k:?}"
    );
    assert_eq!(k.last().unwrap(), "done");
    assert_eq!(joined(&events, "text"), "You said: hello there");
    assert_eq!(joined(&events, "thinking"), "Let me think about it. ");
    let done = events.last().unwrap();
    assert_eq!(done["conversationId"], "c-1");
    let prompt = done["usage"]["promptTokens"].as_u64().unwrap();
    let completion = done["usage"]["completionTokens"].as_u64().unwrap();
    assert!(prompt > 0 && completion > 0);

    let stored = messages(&s, &alice, agent, "c-1").await;
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[0]["role"], "user");
    assert_eq!(stored[0]["content"], "hello there");
    assert!(stored[0]["thinking"].is_null(), "listed, null: {}", stored[0]);
    assert!(stored[0].as_object().unwrap().contains_key("thinking"));
    assert_eq!(stored[1]["role"], "assistant");
    assert_eq!(stored[1]["content"], "You said: hello there");
    assert_eq!(stored[1]["thinking"], "Let me think about it. ");
    assert_eq!(stored[1]["status"], 1);
    assert_eq!(stored[1]["id"], done["messageId"]);

    // The system prompt carried the instruction; quota paid for the answer and the title.
    let sent = s.models.requests();
    assert_eq!(sent[0]["messages"][0]["role"], "system");
    assert_eq!(sent[0]["messages"][0]["content"], "Be kind.");
    let tokens: i64 = sqlx::query_scalar("SELECT tokens FROM users WHERE id = $1")
        .bind(alice_id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(
        tokens <= 100_000 - (prompt + completion) as i64,
        "quota deducted: {tokens}"
    );
    let list = s.app.get(&format!("/agent/{agent}/conversations"), Some(&alice)).await;
    let c = &list.assert_ok()["data"][0];
    assert_eq!(c["conversationId"], "c-1");
    assert_eq!(c["messageCount"], 2);
    assert_eq!(c["userName"], "alice");
    assert!(
        c["title"].as_str().unwrap().starts_with("You said"),
        "title from the model: {c}"
    );
}

/// A long conversation is read a window at a time, newest first, each window oldest first:
/// read whole, a few hundred long turns passed what a buffered function may answer.
#[tokio::test]
async fn a_conversations_messages_are_read_a_window_at_a_time() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Long", "chatModelId": model })).await;
    for turn in ["one", "two", "three"] {
        s.chat(&s.admin, agent, say("long", turn)).await.events();
    }
    let all = messages(&s, &s.admin, agent, "long").await;
    assert_eq!(all.len(), 6);
    let (s, path) = (&s, format!("/agent/{agent}/conversation/long/messages"));
    let window = |query: String| {
        let path = format!("{path}?{query}");
        async move { s.app.get(&path, Some(&s.admin)).await }
    };
    let newest = window("limit=4".into()).await;
    assert_eq!(newest.assert_ok().as_array().unwrap()[..], all[2..]);
    let older = window(format!("limit=4&beforeId={}", all[2]["id"])).await;
    assert_eq!(older.assert_ok().as_array().unwrap()[..], all[..2]);
    for (query, told) in [
        ("limit=0", "limit must be between 1 and 1000"),
        ("limit=1001", "limit must be between 1 and 1000"),
        ("beforeId=0", "beforeId must be between 1"),
    ] {
        window(query.into()).await.assert_error(400, 0, told);
    }
}

/// One chat of `hello` with an agent on the scripted `model_key`: its events, and the tokens its
/// usage record says (one model call).
async fn one_recorded_chat(model_key: &str) -> (Vec<Value>, (i64, i64)) {
    let s = ChatSetup::new().await;
    let model = s.chat_model(model_key, json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Counted", "chatModelId": model }))
        .await;
    let events = s.chat(&s.admin, agent, say("c-1", "hello")).await.events();
    let tokens = sqlx::query_as("SELECT prompt_tokens, completion_tokens FROM model_usage WHERE model_id = $1")
        .bind(model)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    (events, tokens)
}

/// A stream whose usage chunk says 0 tokens is charged an estimate, as one without usage is:
/// taken as reported, the answer was free.
#[tokio::test]
async fn a_stream_reporting_zero_tokens_is_charged_an_estimate() {
    let (events, (prompt, completion)) = one_recorded_chat("chat-zero-usage").await;
    assert_eq!(joined(&events, "text"), "You said: hello");
    assert!(prompt > 0 && completion > 0, "charged {prompt} + {completion}");
}

/// An endpoint reporting a call's usage twice, as a running total, is counted once: the `done`
/// line says what was recorded and charged, not the sum of the reports.
#[tokio::test]
async fn usage_reported_as_a_running_total_is_counted_once() {
    let (events, (prompt, completion)) = one_recorded_chat("chat-running-usage").await;
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{events:?}");
    assert!(completion > 1, "the last report counts: {completion}");
    let reported = (
        done["usage"]["promptTokens"].as_i64(),
        done["usage"]["completionTokens"].as_i64(),
    );
    assert_eq!(reported, (Some(prompt), Some(completion)), "{done}");
}

/// Postgres text holds no NUL: a model's text with one is stored, and streamed, without it (the
/// answer could not be stored and was lost whole).
#[tokio::test]
async fn an_answer_holding_nul_characters_is_stored_without_them() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-nul", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Nul", "chatModelId": model })).await;
    let events = s.chat(&s.admin, agent, say("c-1", "hello")).await.events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    assert_eq!(joined(&events, "text"), "You said: hello");
    let stored = messages(&s, &s.admin, agent, "c-1").await;
    assert_eq!(
        (&stored[1]["content"], &stored[1]["thinking"], &stored[1]["status"]),
        (&json!("You said: hello"), &json!("Hmm. "), &json!(1))
    );
}

/// An administrator's agent on the scripted `chat-agent` model with the guarded MCP fixture
/// (no credentials) as its server; the fixture lives as long as what is returned.
async fn agent_with_tools(s: &ChatSetup, name: &str) -> (api_tests::mcp_servers::Fixture, i64) {
    let model = s.chat_model("chat-agent", json!({})).await;
    let tools = api_tests::mcp_servers::guarded(&["none"]).await;
    let server = s
        .mcp_server(json!({ "name": "tools", "transportType": 2, "endpoint": tools.url("/mcp") }))
        .await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": name, "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [server] }),
        )
        .await;
    (tools, agent)
}

/// A tool's arguments with an escaped NUL parse into one: shown and stored without it, and the
/// turn completes (its statement failed on the NUL, and the whole answer was lost).
#[tokio::test]
async fn tool_arguments_holding_an_escaped_nul_are_stored_without_it() {
    let s = ChatSetup::new().await;
    let (_tools, agent) = agent_with_tools(&s, "Shouter").await;
    let call = r#"CALL shout {"text": "a\u0000b"}"#;
    let events = s.chat(&s.admin, agent, say("n-1", call)).await.events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    let stored = messages(&s, &s.admin, agent, "n-1").await;
    assert_eq!(stored[1]["status"], 1, "{}", stored[1]);
    assert_eq!(
        stored[1]["toolCalls"][0]["arguments"],
        json!({ "text": "ab" }),
        "{}",
        stored[1]
    );
}

/// Two people chatting with one agent call its MCP server in sessions of their own: what a
/// stateful server keeps for one session is never the other's.
#[tokio::test]
async fn people_chatting_with_one_agent_get_mcp_sessions_of_their_own() {
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let (_tools, agent) = agent_with_tools(&s, "Sessions").await;
    let session = |token: String, conversation: &'static str| {
        let s = &s;
        async move {
            let events = s
                .chat(&token, agent, say(conversation, "CALL session_id {}"))
                .await
                .events();
            let text = joined(&events, "text");
            text.strip_prefix("Tool said: ")
                .unwrap_or_else(|| panic!("{events:?}"))
                .to_owned()
        }
    };
    let admins = session(s.admin.clone(), "s-1").await;
    let alices = session(alice.clone(), "s-2").await;
    assert_ne!(admins, alices, "one session for both");
    assert_eq!(
        session(s.admin.clone(), "s-3").await,
        admins,
        "reused by the same person"
    );
    assert_eq!(session(alice, "s-4").await, alices);
}

#[tokio::test]
async fn refusals_store_nothing() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    let agent = s.agent(&s.admin, json!({ "name": "A", "chatModelId": model })).await;
    let off = s
        .agent(&s.admin, json!({ "name": "Off", "chatModelId": model, "status": 0 }))
        .await;
    let modelless = s.agent(&s.admin, json!({ "name": "No model" })).await;

    let r = s.chat(&alice, agent, say("c", "hi")).await.refused();
    r.assert_error(403, 403, "quota");
    s.set_quota(alice_id, 1000).await;
    s.chat(&alice, agent, json!({ "conversationId": "c" }))
        .await
        .refused()
        .assert_error(400, 0, "content is required");
    s.chat(
        &alice,
        agent,
        json!({ "conversationId": "c", "content": "x".repeat(32_001) }),
    )
    .await
    .refused()
    .assert_error(400, 0, "content must be");
    s.chat(
        &alice,
        agent,
        json!({ "conversationId": "x".repeat(129), "content": "hi" }),
    )
    .await
    .refused()
    .assert_error(400, 0, "conversationId");
    s.chat(&alice, off, say("c", "hi"))
        .await
        .refused()
        .assert_error(404, 404, "agent");
    s.chat(&s.admin, modelless, say("c", "hi"))
        .await
        .refused()
        .assert_error(400, 0, "no usable chat model");
    s.chat(&alice, 999_999, say("c", "hi"))
        .await
        .refused()
        .assert_error(404, 404, "agent");
    assert_eq!(s.app.count("conversations").await, 0);
    assert_eq!(s.app.count("messages").await, 0);

    // Without a conversation id one is generated and returned.
    let events = s.chat(&alice, agent, json!({ "content": "hi" })).await.events();
    let id = events.last().unwrap()["conversationId"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
}

/// The chat model comes in the statement that reads the agent: the agent's own model, or the
/// default chat model when it has none, and it must be enabled.
#[tokio::test]
async fn an_agent_chats_with_its_own_model_or_the_default_one_and_never_a_disabled_one() {
    let s = ChatSetup::new().await;
    let modelless = s.agent(&s.admin, json!({ "name": "No model" })).await;
    s.chat(&s.admin, modelless, say("a", "hi"))
        .await
        .refused()
        .assert_error(400, 0, "no default CHAT model is configured");

    let default = s.chat_model("chat-echo", json!({ "isDefault": true })).await;
    let own = s.chat_model("chat-think", json!({})).await;
    let owning = s.agent(&s.admin, json!({ "name": "Own", "chatModelId": own })).await;
    let by_default = s.chat(&s.admin, modelless, say("b", "hi")).await.events();
    assert_eq!(
        joined(&by_default, "thinking"),
        "",
        "the default model, chat-echo, does not think"
    );
    assert_eq!(joined(&by_default, "text"), "You said: hi");
    let by_own = s.chat(&s.admin, owning, say("c", "hi")).await.events();
    assert_eq!(joined(&by_own, "thinking"), "Let me think about it. ");
    let answered_by: Vec<Option<i64>> =
        sqlx::query_scalar("SELECT model_id FROM messages WHERE role = 'assistant' ORDER BY id")
            .fetch_all(&s.app.db)
            .await
            .unwrap();
    assert_eq!(answered_by, [Some(default), Some(own)]);

    s.app
        .put(&format!("/ai-model/config/{own}/disable"), Some(&s.admin), &json!({}))
        .await
        .assert_status_ok();
    let stored = s.app.count("messages").await;
    s.chat(&s.admin, owning, say("c", "again"))
        .await
        .refused()
        .assert_error(400, 0, "is disabled");
    assert_eq!(s.app.count("messages").await, stored);

    // A disabled provider takes its models out of use, the default one included, and gives
    // them back when enabled again.
    s.app
        .put(
            &format!("/ai-model/provider/{}/disable", s.provider),
            Some(&s.admin),
            &json!({}),
        )
        .await
        .assert_status_ok();
    let shown = s.app.get("/ai-model/default/CHAT", Some(&s.admin)).await;
    let shown = shown.assert_status_ok();
    assert_eq!(
        (shown["isEnabled"].as_bool(), shown["usable"].as_bool()),
        (Some(true), Some(false))
    );
    s.chat(&s.admin, modelless, say("b", "again"))
        .await
        .refused()
        .assert_error(
            400,
            0,
            &format!("no default CHAT model is configured that can be used: the default, model config {default}, is disabled (or its provider is)"),
        );
    assert_eq!(s.app.count("messages").await, stored);
    s.app
        .put(
            &format!("/ai-model/provider/{}/enable", s.provider),
            Some(&s.admin),
            &json!({}),
        )
        .await
        .assert_status_ok();
    let again = s.chat(&s.admin, modelless, say("b", "again")).await.events();
    assert_eq!(joined(&again, "text"), "You said: again");
}

/// An agent with web search, on the model that calls the tools its question names: the
/// model's id and the agent's.
async fn searcher(s: &ChatSetup) -> (i64, i64) {
    let model = s.chat_model("chat-agent", json!({})).await;
    let body = json!({ "name": "Searcher", "chatModelId": model, "webSearchEnabled": true });
    (model, s.agent(&s.admin, body).await)
}

#[tokio::test]
async fn a_tool_loop_runs_web_search_and_answers_with_its_result() {
    let s = ChatSetup::new().await;
    let (model, agent) = searcher(&s).await;
    let events = s
        .chat(
            &s.admin,
            agent,
            say("t-1", "CALL web_search {\"query\": \"rust lambda\"}"),
        )
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"]);
    assert_eq!(events[0]["name"], "web_search");
    assert_eq!(events[0]["arguments"], json!({ "query": "rust lambda" }));
    assert_eq!(events[1]["ok"], true);
    let text = joined(&events, "text");
    assert!(
        text.starts_with("Tool said: ") && text.contains("Result 1 for rust lambda"),
        "{text}"
    );
    assert_eq!(events.last().unwrap()["type"], "done");
    let stored = messages(&s, &s.admin, agent, "t-1").await;
    assert_eq!(stored[1]["toolCalls"][0]["name"], "web_search");
    assert_eq!(stored[1]["toolCalls"][0]["ok"], true);
    let count: i32 = sqlx::query_scalar("SELECT tool_call_count FROM messages WHERE role = 'assistant'")
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(count, 1);
    // Both model calls of the turn were recorded, with the tokens the stored answer adds up.
    let (calls, prompt, completion): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint FROM model_usage
         WHERE call_kind = 'chat' AND success",
    )
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    let stored_tokens: (i64, i64) =
        sqlx::query_as("SELECT prompt_tokens, completion_tokens FROM messages WHERE role = 'assistant'")
            .fetch_one(&s.app.db)
            .await
            .unwrap();
    assert_eq!((calls, (prompt, completion)), (2, stored_tokens));
    // The second model call carried the tool's answer.
    let calls: Vec<Value> = s
        .models
        .requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["messages"].as_array().unwrap().last().unwrap()["role"], "tool");

    // One answer asking for more calls than a step runs: the first MAX_TOOL_CALLS_PER_STEP
    // run, every other call is answered "not run", and the turn goes on to its answer.
    let max = shared::agents::chat::MAX_TOOL_CALLS_PER_STEP;
    let many: Vec<String> = (0..max + 2)
        .map(|i| format!("CALL web_search {{\"query\": \"q{i}\"}}"))
        .collect();
    let before = s.models.requests().len();
    let events = s.chat(&s.admin, agent, say("t-3", &many.join("\n"))).await.events();
    let ran = kinds(&events).iter().filter(|k| **k == "tool_call").count();
    assert_eq!(ran, max, "{events:?}");
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    let answered = s.models.requests()[before + 1]["messages"].as_array().unwrap().clone();
    let results: Vec<&str> = answered
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), max + 2, "every call has its answer");
    assert!(
        results[..max].iter().all(|r| r.contains("Result 1 for q")),
        "{results:?}"
    );
    assert!(results[max..].iter().all(|r| r.starts_with("not run")), "{results:?}");
    let stored = messages(&s, &s.admin, agent, "t-3").await;
    assert_eq!(stored[1]["toolCalls"].as_array().unwrap().len(), max);

    // An answer asking for more calls than one answer may is refused before its endpoint
    // reports usage; the calls it streamed until then count in the estimate it is charged.
    let flood: Vec<String> = (0..=shared::models::client::MAX_TOOL_CALLS)
        .map(|i| format!("CALL web_search {{\"query\": \"q{i}\"}}"))
        .collect();
    let events = s.chat(&s.admin, agent, say("t-5", &flood.join("\n"))).await.events();
    assert_eq!(events.last().unwrap()["type"], "error", "{events:?}");
    let completion: i64 = sqlx::query_scalar(
        "SELECT completion_tokens FROM model_usage WHERE call_kind = 'chat' AND NOT success
         ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    // At least 64 calls of the shortest arguments came before the refusal.
    let streamed = 64 * "web_search{\"query\": \"q0\"}".len() as i64;
    assert!(
        completion >= streamed / 4,
        "{completion} tokens for {streamed} characters"
    );

    // Arguments cut off mid-way (an answer stopped by its token limit) run nothing: the model
    // is told they are not JSON, not given the tool's result for no arguments.
    let before = s.models.requests().len();
    let events = s
        .chat(&s.admin, agent, say("t-4", "CALL web_search {\"query\": \"cut"))
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"], "{events:?}");
    assert_eq!(events[0]["arguments"], "{\"query\": \"cut");
    assert_eq!(events[1]["ok"], false);
    let answered = s.models.requests()[before + 1]["messages"].as_array().unwrap().clone();
    let told = answered.last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(
        told.contains("not valid JSON") && told.contains("was not run"),
        "{told}"
    );

    // Without web search the tool is not offered.
    let plain = s
        .agent(&s.admin, json!({ "name": "Plain", "chatModelId": model }))
        .await;
    let events = s
        .chat(&s.admin, plain, say("t-2", "CALL web_search {\"query\": \"x\"}"))
        .await
        .events();
    assert_eq!(joined(&events, "text"), "Tool web_search is not available");

    // Deleting the model keeps the usage, still its statistics, and the answers.
    let other = s.chat_model("chat-echo", json!({})).await;
    s.app
        .delete(&format!("/ai-model/config/{other}"), Some(&s.admin))
        .await
        .assert_status_ok();
    let unrelated: i64 = sqlx::query_scalar("SELECT count(*) FROM model_usage WHERE model_id = $1")
        .bind(model)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(unrelated >= 2, "another config's deletion leaves these rows alone");
    // Renamed to a name that sorts first, and called once more: its last name is the newest
    // call's, whatever the older calls' copies say.
    s.app
        .put(
            &format!("/ai-model/config/{model}"),
            Some(&s.admin),
            &json!({ "modelName": "Aardvark" }),
        )
        .await
        .assert_status_ok();
    s.chat(&s.admin, plain, say("t-5", "after the rename")).await.events();
    let calls: i64 = sqlx::query_scalar("SELECT count(*) FROM model_usage WHERE model_id = $1")
        .bind(model)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(calls > unrelated, "called after the rename");
    let stat = s
        .app
        .get(&format!("/ai-model/usage/stat/{model}"), Some(&s.admin))
        .await;
    let stat = stat.assert_status_ok().clone();
    s.app
        .delete(&format!("/ai-model/config/{model}"), Some(&s.admin))
        .await
        .assert_status_ok();
    let (usage_rows, usage_ids, answer_ids): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM model_usage), (SELECT count(model_id) FROM model_usage),
                (SELECT count(model_id) FROM messages)",
    )
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    assert!(usage_rows >= 2);
    // Both keep the deleted config's id: clearing the answers' read the whole messages table.
    let answers = s.app.count("messages WHERE role = 'assistant'").await;
    assert_eq!((usage_ids, answer_ids), (usage_rows, answers));
    let stats = s
        .app
        .get("/ai-model/usage/global-stats?pageSize=100", Some(&s.admin))
        .await;
    let stats = stats.assert_status_ok().as_array().unwrap().clone();
    let deleted = stats
        .iter()
        .find(|m| m["modelId"] == model)
        .expect("listed after its deletion");
    for field in ["modelName", "providerName", "totalCalls", "totalTokensUsed"] {
        assert_eq!(deleted[field], stat[field], "{field}: {deleted} against {stat}");
    }
    assert_eq!(deleted["totalCalls"], calls);
    assert_eq!(deleted["modelName"], "Aardvark");
}

#[tokio::test]
async fn an_upstream_failure_mid_stream_ends_with_an_error_line_and_keeps_the_partial_answer() {
    let s = ChatSetup::new().await;
    let broken = s.chat_model("chat-error", json!({})).await;
    let down = s.chat_model("chat-500", json!({})).await;
    let a = s
        .agent(&s.admin, json!({ "name": "Broken", "chatModelId": broken }))
        .await;
    let b = s.agent(&s.admin, json!({ "name": "Down", "chatModelId": down })).await;

    let events = s.chat(&s.admin, a, say("e-1", "one two three")).await.events();
    assert_eq!(kinds(&events), ["text", "error"]);
    assert!(
        events[1]["message"].as_str().unwrap().contains("overloaded"),
        "{events:?}"
    );
    let stored = messages(&s, &s.admin, a, "e-1").await;
    assert_eq!(stored[0]["content"], "one two three", "the question is kept");
    assert_eq!(stored[1]["status"], 2, "failed");
    assert_eq!(stored[1]["content"], joined(&events, "text"));

    let events = s.chat(&s.admin, b, say("e-2", "hi")).await.events();
    assert_eq!(kinds(&events), ["error"]);
    let stored = messages(&s, &s.admin, b, "e-2").await;
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1]["status"], 2);
    let error: String = sqlx::query_scalar("SELECT error FROM messages WHERE id = $1")
        .bind(stored[1]["id"].as_i64().unwrap())
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(
        error.contains("500") || error.contains("server had an error"),
        "{error}"
    );
}

/// What a model endpoint says about a failure is told only to the owner of the model's
/// config: a regular user chatting on an administrator's model learns what failed, not what the
/// endpoint answered (which, for an internal service, could be anything). The stored message
/// keeps the whole error.
#[tokio::test]
async fn only_the_models_owner_is_told_what_its_endpoint_answered() {
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let broken = s.chat_model("chat-error", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Broken", "chatModelId": broken }))
        .await;

    let told_owner = s.chat(&s.admin, agent, say("o-1", "one two three")).await.events();
    let told_alice = s.chat(&alice, agent, say("a-1", "one two three")).await.events();
    let (owner_line, alice_line) = (
        told_owner.last().unwrap()["message"].as_str().unwrap(),
        told_alice.last().unwrap()["message"].as_str().unwrap(),
    );
    assert!(owner_line.contains("overloaded"), "{told_owner:?}");
    assert!(
        alice_line.starts_with("the model call failed: ") && !alice_line.contains("overloaded"),
        "{told_alice:?}"
    );
    let stored = messages(&s, &alice, agent, "a-1").await;
    let kept: String = sqlx::query_scalar("SELECT error FROM messages WHERE id = $1")
        .bind(stored[1]["id"].as_i64().unwrap())
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(kept.contains("overloaded"), "{kept}");
}

/// Every way a model endpoint fails, for a regular user with a quota: an error line, the
/// partial answer stored as failed, and the quota charged exactly what the calls used (a
/// refused call nothing).
#[tokio::test]
async fn model_failures_end_with_an_error_keep_the_partial_answer_and_charge_only_what_was_used() {
    const QUOTA: i64 = 100_000;
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, QUOTA).await;
    let charged = || async {
        let (left, used) = s.tokens_left_and_used(alice_id).await;
        (QUOTA - left, used)
    };
    // (model, text streamed before the failure, what the stored error says)
    let cases = [
        ("chat-429", "", "rate"),
        ("chat-500", "", "500"),
        ("chat-error", "You ", "overloaded"),
        ("chat-cut", "You said: ", "ended"),
        ("chat-garbage", "You said: ", "not json"),
    ];
    for (i, (key, partial, cause)) in cases.into_iter().enumerate() {
        let model = s.chat_model(key, json!({})).await;
        let agent = s.agent(&s.admin, json!({ "name": key, "chatModelId": model })).await;
        let (before, _) = charged().await;
        let conversation = format!("f-{i}");
        let events = s
            .chat(&alice, agent, say(&conversation, "one two three"))
            .await
            .events();
        assert_eq!(events.last().unwrap()["type"], "error", "{key}: {events:?}");
        assert_eq!(joined(&events, "text"), partial, "{key}");
        let stored = messages(&s, &alice, agent, &conversation).await;
        assert_eq!((stored.len(), &stored[1]["status"]), (2, &json!(2)), "{key}: failed");
        assert_eq!(stored[1]["content"], partial, "{key}: the partial answer is kept");
        let error: String = sqlx::query_scalar("SELECT error FROM messages WHERE id = $1")
            .bind(stored[1]["id"].as_i64().unwrap())
            .fetch_one(&s.app.db)
            .await
            .unwrap();
        assert!(error.to_lowercase().contains(cause), "{key}: {error}");
        // Settled before the error line was sent (under Lambda nothing may run after the
        // answer ends): the books agree at once.
        let books = charged().await;
        assert_eq!(books.0, books.1, "{key}: charged exactly what the calls used");
        if partial.is_empty() {
            assert_eq!(books.0, before, "{key}: nothing generated, nothing charged");
        } else {
            assert!(books.0 > before, "{key}: the partial answer is paid for");
        }
    }
}

/// What an endpoint does wrong, or takes too long over, ends the turn as failed with an
/// `error` line, the answer so far stored with the reason: an answer past MAX_ANSWER_BYTES
/// (the endpoint ignored max_tokens), tools asked for when none were offered, a turn past
/// CHAT_TURN_TIMEOUT_SECS.
#[tokio::test]
async fn endpoints_that_misbehave_or_take_too_long_end_the_turn_as_failed() {
    let s = ChatSetup::with(api_tests::Store::Filesystem, &[("CHAT_TURN_TIMEOUT_SECS", "1")]).await;
    let cases = [
        ("chat-flood", "passed 4 MiB and was cut off"),
        ("chat-loop", "asked for tools it was not offered"),
        ("chat-slow", "passed its time limit of 1 s"),
    ];
    // Each failure is logged with its request's id: the response said 200 before it.
    let logs = api_tests::mcp_servers::LogCapture::start();
    for (i, (key, reason)) in cases.into_iter().enumerate() {
        let model = s.chat_model(key, json!({})).await;
        let agent = s.agent(&s.admin, json!({ "name": key, "chatModelId": model })).await;
        let conversation = format!("m-{i}");
        let before = s.models.requests().len();
        let events = s
            .chat(&s.admin, agent, say(&conversation, "one two three four five six seven"))
            .await
            .events();
        let last = events.last().unwrap();
        assert_eq!(last["type"], "error", "{key}: {last}");
        assert!(last["message"].as_str().unwrap().contains(reason), "{key}: {last}");
        let stored = messages(&s, &s.admin, agent, &conversation).await;
        assert_eq!(stored[1]["status"], 2, "{key}: stored as failed");
        let calls = s.models.requests().len() - before;
        assert_eq!(calls, 1, "{key}: one model call, no more rounds");
        let logged = logs.text();
        let line = logged
            .lines()
            .find(|l| l.contains("the answer ended with an error") && l.contains(reason))
            .unwrap_or_else(|| panic!("{key}: no log line of the failure in {logged}"));
        assert!(line.contains("request_id="), "{key}: {line}");
    }
    let flooded: i32 = sqlx::query_scalar("SELECT max(length(content)) FROM messages")
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert!(
        (shared::agents::chat::MAX_ANSWER_BYTES..shared::agents::chat::MAX_ANSWER_BYTES + 64 * 1024 + 1)
            .contains(&(flooded as usize)),
        "the answer kept is cut at the limit: {flooded}"
    );
}

/// An agent of `alice` on her own endpoint, which reports more tokens than an i64 holds, with
/// `config` for its model config.
async fn greedy_agent(s: &ChatSetup, alice: &str, config: Value) -> i64 {
    let provider = s.app.provider(&s.admin, "greedy").await;
    let url = &s.models.base_url;
    let greedy = s.app.model(alice, provider, "CHAT", "chat-greedy", url, config).await;
    s.agent(alice, json!({ "name": "Greedy", "chatModelId": greedy })).await
}

/// A reported usage past what an i64 holds charges what it can, never a negative amount:
/// an endpoint a user configures cannot hand them a quota.
#[tokio::test]
async fn an_absurd_reported_usage_cannot_raise_a_quota() {
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 1_000).await;
    let agent = greedy_agent(&s, &alice, json!({ "scope": "PERSONAL" })).await;
    let events = s.chat(&alice, agent, say("g-1", "hello")).await.events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    let mut left = i64::MAX;
    for _ in 0..600 {
        left = s.tokens_left_and_used(alice_id).await.0;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "charged to zero, not credited");
}

/// An agent whose model endpoint reports absurd usage cannot empty the quota of whoever
/// chats with it: a call is charged at most twice what it held, and another user's config
/// cannot make the hold itself large (`maxTokens` a million).
#[tokio::test]
async fn another_users_endpoint_cannot_empty_a_chatters_quota() {
    let s = ChatSetup::new().await;
    let (_, alice) = s.app.regular_user("alice").await;
    let (bob_id, bob) = s.app.regular_user("bob").await;
    s.set_quota(bob_id, 1_000_000).await;
    let config = json!({ "scope": "PERSONAL", "configJson": { "maxTokens": 1_000_000 } });
    let agent = greedy_agent(&s, &alice, config).await;
    let events = s.chat(&bob, agent, say("g-1", "hello")).await.events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    // The turn's call and its title's, each held and charged on its own.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (left, _) = s.tokens_left_and_used(bob_id).await;
    assert!(
        (1_000_000 - 60_000..1_000_000).contains(&left),
        "charged at most twice each hold: {left} left"
    );
}

/// An answer that cannot be stored is not reported done, and the turn's usage is still kept.
#[tokio::test]
async fn an_answer_that_cannot_be_stored_ends_with_an_error_and_keeps_its_usage() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Echo", "chatModelId": model })).await;
    for ddl in [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
        "CREATE TRIGGER refuse BEFORE UPDATE ON messages FOR EACH ROW EXECUTE FUNCTION refuse()",
    ] {
        sqlx::query(ddl).execute(&s.app.db).await.unwrap();
    }
    let events = s.chat(&s.admin, agent, say("s-1", "hello")).await.events();
    let last = events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["message"].as_str()),
        (Some("error"), Some("the answer could not be stored; try again"))
    );
    assert!(!kinds(&events).contains(&"done".to_owned()));
    let mut usage = 0;
    for _ in 0..600 {
        usage = s.app.count("model_usage").await;
        if usage > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(usage, 1, "the model call's usage is stored on its own");
}

/// An agent whose chat model takes images, and an image of the administrator's to attach.
async fn seeing_agent_and_image(s: &ChatSetup) -> (i64, i64) {
    let vision = s
        .chat_model("chat-echo", json!({ "configJson": { "capabilities": ["vision"] } }))
        .await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Seeing", "chatModelId": vision }))
        .await;
    (agent, upload(s, &s.admin, "a.png", PNG).await)
}

/// The chat's response once its headers are in, its body left to the caller (to drop).
async fn open_chat(s: &ChatSetup, agent: i64, body: Value) -> reqwest::Response {
    s.app
        .client
        .post(s.app.url(&format!("/agent/{agent}/chat")))
        .header("Svc-Auth", &s.admin)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// The status the only assistant message settles on (waiting while it is 0, generating).
async fn settled_answer_status(s: &ChatSetup) -> i16 {
    let mut status = 0;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = sqlx::query_scalar::<_, i16>("SELECT status FROM messages WHERE role = 'assistant'")
            .fetch_one(&s.app.db)
            .await
            .unwrap();
        if status != 0 {
            break;
        }
    }
    status
}

#[tokio::test]
async fn a_client_disconnect_stops_the_upstream_and_keeps_the_partial_answer() {
    let s = ChatSetup::new().await;
    let slow = s.chat_model("chat-slow", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": slow })).await;
    let resp = open_chat(&s, agent, say("d-1", "a b c d e f g h i j")).await;
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("\"text\""));
    drop(body);

    // The stored answer turns to "stopped" and the model server stops sending.
    assert_eq!(settled_answer_status(&s).await, 3, "stopped");
    // The model server notices the closed connection at its next write or two.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent_then = s.models.chunks_sent();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(s.models.chunks_sent(), sent_then, "the upstream stream was closed");
    assert!(
        sent_then < 12,
        "far fewer than the 16 chunks of the whole answer: {sent_then}"
    );
    let stored = messages(&s, &s.admin, agent, "d-1").await;
    let partial = stored[1]["content"].as_str().unwrap();
    assert!(
        partial.starts_with("You") && partial.len() < "You said: a b c d e f g h i j".len(),
        "{partial}"
    );
}

/// A stop asked for through the API ends the answer wherever its turn runs (the closed
/// connection does not reach a function behind API Gateway): the client still reading gets a
/// `stopped` line, the upstream call is closed, and what was generated is kept.
#[tokio::test]
async fn a_stop_asked_for_ends_the_answer_and_keeps_what_was_generated() {
    let s = ChatSetup::new().await;
    let slow = s.chat_model("chat-slow", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": slow })).await;
    let stop = format!("/agent/{agent}/conversation/s-1/stop");
    let resp = open_chat(&s, agent, say("s-1", "a b c d e f g h i j")).await;
    let mut body = resp.bytes_stream();
    let mut read = String::from_utf8_lossy(&body.next().await.unwrap().unwrap()).into_owned();
    assert!(read.contains("\"text\""), "{read}");
    let asked = s.app.post(&stop, Some(&s.admin), &json!({})).await;
    assert_eq!(asked.assert_ok()["stopped"], true);
    while let Some(piece) = body.next().await {
        read.push_str(&String::from_utf8_lossy(&piece.unwrap()));
    }
    let events = ndjson(&read);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "stopped", "{read}");
    assert_eq!(last["conversationId"], "s-1");
    let texts = events.iter().filter(|e| e["type"] == "text").count();
    assert!(texts < 16, "ended before the whole answer's 16 chunks: {texts}");
    let stored = messages(&s, &s.admin, agent, "s-1").await;
    assert_eq!(stored[1]["id"], last["messageId"]);
    assert_eq!(stored[1]["status"], 3, "{:?}", stored[1]);
    assert_eq!(stored[1]["content"], joined(&events, "text"));
    // The model server stops sending once the connection is closed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent_then = s.models.chunks_sent();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(s.models.chunks_sent(), sent_then, "the upstream stream was closed");
    // Nothing under way any more.
    let again = s.app.post(&stop, Some(&s.admin), &json!({})).await;
    assert_eq!(again.assert_ok()["stopped"], false);
    s.app
        .post(
            &format!("/agent/{agent}/conversation/never/stop"),
            Some(&s.admin),
            &json!({}),
        )
        .await
        .assert_error(404, 404, "conversation");
}

/// A client that leaves during a tool call has the call cancelled at the MCP server
/// (`notifications/cancelled`), which would otherwise work on for nobody.
#[tokio::test]
async fn a_client_gone_during_a_tool_call_cancels_it_at_the_server() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-agent", json!({})).await;
    let token = "cancel-token-abcdef";
    let tools = api_tests::mcp_servers::guarded(&["bearer", token]).await;
    let server = s
        .mcp_server(
            json!({ "name": "waiting", "transportType": 2, "endpoint": tools.url("/mcp"),
            "authType": 2, "authConfig": { "token": token } }),
        )
        .await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Waiter", "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [server] }),
        )
        .await;
    let until = |line: &'static str| {
        let tools = &tools;
        async move {
            for _ in 0..100 {
                if tools.count(line) > 0 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }
    };
    let stream = open_chat(&s, agent, say("w-1", "CALL wait {\"seconds\": 60}"))
        .await
        .bytes_stream();
    assert!(until("WAIT-STARTED").await, "the tool call reached the server");
    drop(stream);
    assert!(until("WAIT-CANCELLED").await, "the server was told to stop");
    assert_eq!(settled_answer_status(&s).await, 3, "stopped");
}

/// A client that leaves while the turn's context is gathered (here a slow embedding model
/// recalling memories) is noticed there: the paid chat model is never called, and the turn is
/// stored as stopped.
#[tokio::test]
async fn a_client_gone_before_the_model_call_is_noticed_before_it() {
    let s = ChatSetup::new().await;
    let chat = s.chat_model("chat-echo", json!({})).await;
    let slow = s.embedding_model("emb-8-slow").await;
    let config = s.memory_config(slow).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Slow recall", "chatModelId": chat, "memoryEnabled": true, "memoryConfigId": config }),
        )
        .await;
    let resp = open_chat(&s, agent, say("gone-early", "what do you remember")).await;
    assert_eq!(resp.status(), 200);
    drop(resp);
    assert_eq!(settled_answer_status(&s).await, 3, "stopped");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let chats = s
        .models
        .requests()
        .into_iter()
        .filter(|r| r["model"] == "chat-echo")
        .count();
    assert_eq!(chats, 0, "the chat model was not called");
}

#[tokio::test]
async fn the_history_window_keeps_the_last_messages_of_the_conversation() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Short", "chatModelId": model, "shortTermMemorySize": 2 }),
        )
        .await;
    for word in ["one", "two", "three"] {
        s.chat(&s.admin, agent, say("h-1", word)).await.events();
    }
    s.chat(&s.admin, agent, say("h-2", "other")).await.events();
    let calls: Vec<Value> = s
        .models
        .requests()
        .into_iter()
        .filter(|r| r["stream"] == true)
        .collect();
    let third = calls[2]["messages"].as_array().unwrap();
    let contents: Vec<&str> = third.iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(
        contents,
        ["two", "You said: two", "three"],
        "two history messages, then the question"
    );
    let fourth = calls[3]["messages"].as_array().unwrap();
    assert_eq!(fourth.len(), 1, "a new conversation starts empty");
}

/// A failed answer leaves its question without a reply, and a window can begin with an answer;
/// the model is still sent roles that take turns, beginning with a question, as strict chat
/// templates demand. The context preview shows the same history.
#[tokio::test]
async fn the_history_sent_takes_turns_after_a_failed_answer() {
    let s = ChatSetup::new().await;
    let down = s.chat_model("chat-500", json!({})).await;
    let echo = s.chat_model("chat-echo", json!({})).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Strict", "chatModelId": echo, "shortTermMemorySize": 2 }),
        )
        .await;
    let use_model = |model: i64| {
        let s = &s;
        async move {
            s.app
                .put(
                    &format!("/agent/{agent}"),
                    Some(&s.admin),
                    &json!({ "chatModelId": model }),
                )
                .await
                .assert_ok();
        }
    };
    let pairs = |messages: &Value| -> Vec<(String, String)> {
        messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().into(),
                    m["content"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    s.chat(&s.admin, agent, say("alt", "one")).await.events();
    use_model(down).await;
    let failed = s.chat(&s.admin, agent, say("alt", "two")).await.events();
    assert_eq!(kinds(&failed), ["error"]);

    // The window of two (the first answer, then the question whose answer failed) begins with
    // an answer: left out.
    let preview = s
        .app
        .get(
            &format!("/memory/agent/{agent}/conversations/alt/context-preview"),
            Some(&s.admin),
        )
        .await;
    let preview = preview.assert_ok();
    assert_eq!(
        pairs(&preview["messages"]),
        [("user".into(), "two".into())],
        "{preview}"
    );
    assert_eq!(preview["compressionApplied"], true, "{preview}");

    use_model(echo).await;
    s.chat(&s.admin, agent, say("alt", "three")).await.events();
    let sent = s
        .models
        .requests()
        .into_iter()
        .rfind(|r| r["stream"] == true && r["model"] == "chat-echo")
        .unwrap();
    // The question that went unanswered goes with the new one.
    assert_eq!(
        pairs(&sent["messages"]),
        [("user".into(), "two\n\nthree".into())],
        "{sent}"
    );
}

/// The history is bounded by size too: the newest messages that fit the history's bytes, each
/// cut. Bounded by count alone, a conversation of long stored answers made every turn read
/// hundreds of megabytes into the database and the function.
#[tokio::test]
async fn the_history_keeps_to_its_size_however_long_the_stored_answers() {
    use shared::agents::conversation_repo::{HISTORY_BYTES, HISTORY_MESSAGE_CHARS};
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Big", "chatModelId": model })).await;
    s.chat(&s.admin, agent, say("big", "first")).await.events();
    // Eight more messages of 40,000 characters, as a model's long answers are stored.
    sqlx::query(
        "INSERT INTO messages (conversation_id, agent_id, role, content)
         SELECT c.id, c.agent_id, CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END, repeat(i::text, 40000)
         FROM conversations c, generate_series(0, 7) i WHERE c.conversation_key = 'big'",
    )
    .execute(&s.app.db)
    .await
    .unwrap();
    s.chat(&s.admin, agent, say("big", "again")).await.events();
    let last = s.models.requests().into_iter().rfind(|r| r["stream"] == true).unwrap();
    let contents: Vec<String> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    let (question, history) = contents.split_last().unwrap();
    assert_eq!(question, "again");
    let fit = (HISTORY_BYTES / HISTORY_MESSAGE_CHARS) as usize;
    assert_eq!(history.len(), fit, "the newest that fit");
    assert!(history.iter().all(|c| c.len() == HISTORY_MESSAGE_CHARS as usize));
    assert_eq!(history.last().unwrap(), &"7".repeat(HISTORY_MESSAGE_CHARS as usize));
}

async fn upload(s: &ChatSetup, token: &str, name: &str, bytes: &[u8]) -> i64 {
    let r = s.app.upload_resource(token, name, bytes.to_vec(), None).await;
    r.assert_ok()["id"].as_i64().unwrap()
}

fn image(id: i64) -> Value {
    json!({ "type": "IMAGE", "resourceId": id })
}

#[tokio::test]
async fn every_attachment_rule_has_its_own_refusal_and_stores_nothing() {
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let plain = s.chat_model("chat-echo", json!({})).await;
    let vision = s
        .chat_model("chat-echo", json!({ "configJson": { "capabilities": ["vision"] } }))
        .await;
    let blind = s
        .agent(&s.admin, json!({ "name": "Blind", "chatModelId": plain }))
        .await;
    let seeing = s
        .agent(&s.admin, json!({ "name": "Seeing", "chatModelId": vision }))
        .await;
    let png = upload(&s, &alice, "a.png", PNG).await;
    let gif = upload(&s, &alice, "a.gif", GIF).await;
    let big = upload(&s, &alice, "big.png", PNG).await;
    sqlx::query("UPDATE resources SET file_size = 11 * 1024 * 1024 WHERE id = $1")
        .bind(big)
        .execute(&s.app.db)
        .await
        .unwrap();
    let admins = upload(&s, &s.admin, "admin.png", PNG).await;

    let with = |items: Value| json!({ "conversationId": "v-1", "content": "look", "attachments": items });
    let twice = format!("attachments[1].resourceId: resource {png} is already attached to this message");
    let cases = [
        (blind, with(json!([image(png)])), "does not accept images"),
        (
            seeing,
            with(json!([{ "type": "FILE", "resourceId": png }])),
            "attachments[0].type must be IMAGE",
        ),
        (
            seeing,
            with(json!([{ "resourceId": png }])),
            "attachments[0].type is required",
        ),
        (
            seeing,
            with(json!([{ "type": "IMAGE" }])),
            "attachments[0].resourceId is required",
        ),
        (
            seeing,
            with(json!([image(999_999)])),
            "attachments[0].resourceId: resource 999999 does not exist",
        ),
        (
            seeing,
            with(json!([image(admins)])),
            "attachments[0].resourceId: resource",
        ),
        (
            seeing,
            with(json!([image(png), image(gif)])),
            "attachments[1]: only JPG, PNG and WEBP",
        ),
        (seeing, with(json!([image(big)])), "at most 10 MB"),
        (
            seeing,
            with(json!([image(png), image(png), image(png), image(png)])),
            "at most 3 images",
        ),
        (seeing, with(json!([image(png), image(png)])), twice.as_str()),
    ];
    for (agent, body, needle) in cases {
        s.chat(&alice, agent, body).await.refused().assert_error(400, 0, needle);
        // Checked before anything is held: the quota is as it was when the answer comes.
        assert_eq!(s.app.tokens_of(alice_id).await, 100_000, "{needle}");
    }
    // What `/resource` keeps from everyone but its uploader, or from everyone, is not
    // attachable either: a user's knowledge-base upload in progress (administrators included)
    // and an external user's image (whoever created the app and so the row).
    let preview = upload(&s, &alice, "preview.png", PNG).await;
    sqlx::query("UPDATE resources SET biz_type = 'RAG_UPLOAD_PREVIEW' WHERE id = $1")
        .bind(preview)
        .execute(&s.app.db)
        .await
        .unwrap();
    let visitors = upload(&s, &alice, "visitor.png", PNG).await;
    sqlx::query(
        "WITH a AS (INSERT INTO apps (app_id, app_name, token_enc, creator_id)
                    VALUES ('attachments', 'Attachments', 'sealed', $2) RETURNING id),
              u AS (INSERT INTO external_users (app_id, open_id) SELECT id, 'visitor' FROM a RETURNING id)
         INSERT INTO external_resources (resource_id, external_user_id) SELECT $1, id FROM u",
    )
    .bind(visitors)
    .bind(alice_id)
    .execute(&s.app.db)
    .await
    .unwrap();
    for (token, id) in [(&s.admin, preview), (&s.admin, visitors), (&alice, visitors)] {
        s.chat(token, seeing, with(json!([image(id)])))
            .await
            .refused()
            .assert_error(
                400,
                0,
                &format!("attachments[0].resourceId: resource {id} does not exist"),
            );
    }
    assert_eq!(s.app.count("conversations").await, 0);
    assert_eq!(s.app.count("messages").await, 0);

    // Two images now, one later: the third fits, a fourth does not.
    let second = upload(&s, &alice, "b.png", PNG).await;
    let events = s
        .chat(&alice, seeing, with(json!([image(png), image(second)])))
        .await
        .events();
    assert_eq!(events.last().unwrap()["type"], "done");
    let sent = s.models.requests().into_iter().find(|r| r["stream"] == true).unwrap();
    let parts = sent["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(parts[0]["text"], "look");
    assert!(parts[1]["image_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));
    s.chat(&alice, seeing, with(json!([image(png)]))).await.events();
    let before = s.app.count("messages").await;
    let left = s.app.tokens_of(alice_id).await;
    let r = s.chat(&alice, seeing, with(json!([image(png)]))).await.refused();
    r.assert_error(400, 0, "it has 3, this message adds 1");
    assert_eq!(s.app.count("messages").await, before);
    // Refused after its tokens were held: given back before the answer.
    assert_eq!(s.app.tokens_of(alice_id).await, left);
    let stored = messages(&s, &alice, seeing, "v-1").await;
    assert_eq!(stored[0]["attachments"], json!([image(png), image(second)]));
}

#[tokio::test]
async fn conversations_are_listed_per_owner_and_deleted_with_their_messages() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    let (bob_id, bob) = s.app.regular_user("bob").await;
    s.set_quota(alice_id, 100_000).await;
    s.set_quota(bob_id, 100_000).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Shared", "chatModelId": model }))
        .await;
    s.chat(&alice, agent, say("same-id", "from alice")).await.events();
    s.chat(&bob, agent, say("same-id", "from bob")).await.events();

    // The same conversation id from two users is two conversations.
    let a = messages(&s, &alice, agent, "same-id").await;
    assert_eq!(a[0]["content"], "from alice");
    let b = messages(&s, &bob, agent, "same-id").await;
    assert_eq!(b[0]["content"], "from bob");
    let list = s.app.get(&format!("/agent/{agent}/conversations"), Some(&alice)).await;
    assert_eq!(list.assert_ok()["total"], 1, "users see their own");
    let list = s
        .app
        .get(&format!("/agent/{agent}/conversations"), Some(&s.admin))
        .await;
    let listed = list.assert_ok()["data"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 2, "the agent's creator sees all");
    let owners: Vec<i64> = listed.iter().map(|c| c["userId"].as_i64().unwrap()).collect();
    assert!(owners.contains(&alice_id) && owners.contains(&bob_id), "{listed:?}");
    assert!(listed.iter().all(|c| c["externalUserId"].is_null()));
    // Two owners chose the id: the creator says whose, or is told to.
    let path = format!("/agent/{agent}/conversation/same-id/messages");
    s.app
        .get(&path, Some(&s.admin))
        .await
        .assert_error(409, 409, "say whose with userId or externalUserId");
    for (id, said) in [(alice_id, "from alice"), (bob_id, "from bob")] {
        let theirs = s.app.get(&format!("{path}?userId={id}"), Some(&s.admin)).await;
        assert_eq!(theirs.assert_ok()[0]["content"], said);
    }
    s.app
        .get(&format!("{path}?userId={alice_id}&externalUserId=1"), Some(&s.admin))
        .await
        .assert_error(400, 0, "userId, externalUserId: name one of them");
    s.app
        .delete(&format!("/agent/{agent}/conversation/same-id"), Some(&s.admin))
        .await
        .assert_error(409, 409, "say whose");
    // A user naming someone else is answered as if it did not exist.
    s.app
        .get(&format!("{path}?userId={bob_id}"), Some(&alice))
        .await
        .assert_error(404, 404, "conversation not found");
    assert_eq!(s.app.count("messages").await, 4, "nothing deleted");
    let future = s
        .app
        .get(
            &format!("/agent/{agent}/conversations?start=2999-01-01&end=2999-12-31"),
            Some(&s.admin),
        )
        .await;
    assert_eq!(future.assert_ok()["total"], 0);
    s.app
        .get(&format!("/agent/{agent}/conversations?start=tomorrow"), Some(&s.admin))
        .await
        .assert_error(400, 0, "start must be a date");

    s.app
        .get(&format!("/agent/{agent}/conversation/nope/messages"), Some(&alice))
        .await
        .assert_error(404, 404, "conversation not found");
    s.app
        .delete(&format!("/agent/{agent}/conversation/same-id"), Some(&alice))
        .await
        .assert_ok();
    assert_eq!(
        messages(&s, &bob, agent, "same-id").await.len(),
        2,
        "bob's is untouched"
    );
    assert_eq!(s.app.count("messages").await, 2);
    // One owner left with the id: the creator needs to name nobody.
    let left = s.app.get(&path, Some(&s.admin)).await;
    assert_eq!(left.assert_ok()[0]["content"], "from bob");
    s.app
        .delete(
            &format!("/agent/{agent}/conversation/same-id?userId={bob_id}"),
            Some(&s.admin),
        )
        .await
        .assert_ok();
    assert_eq!(s.app.count("messages").await, 0);
    s.chat(&bob, agent, say("same-id", "again")).await.events();

    // The creator chose the id too: their own is not taken for bob's listed row.
    s.chat(&s.admin, agent, say("same-id", "from the creator"))
        .await
        .events();
    s.app
        .delete(&format!("/agent/{agent}/conversation/same-id"), Some(&s.admin))
        .await
        .assert_error(409, 409, "say whose");
    assert_eq!(s.app.count("messages").await, 4, "nothing deleted");
    let admin_id = s.app.get("/user", Some(&s.admin)).await.assert_ok()["id"]
        .as_i64()
        .unwrap();
    let own = s.app.get(&format!("{path}?userId={admin_id}"), Some(&s.admin)).await;
    assert_eq!(own.assert_ok()[0]["content"], "from the creator");
    // Bob, who manages nothing, still finds his own without naming it.
    assert_eq!(messages(&s, &bob, agent, "same-id").await[0]["content"], "again");

    // Deleting the agent takes its conversations and messages.
    s.app
        .delete(&format!("/agent/{agent}"), Some(&s.admin))
        .await
        .assert_ok();
    assert_eq!(s.app.count("conversations").await, 0);
    assert_eq!(s.app.count("messages").await, 0);
}

async fn usage_rows(s: &ChatSetup) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM model_usage")
        .fetch_one(&s.app.db)
        .await
        .unwrap()
}

/// A usage record of one chat call on `model`.
async fn call_of(s: &ChatSetup, model: i64) -> shared::models::usage::UsageRecord {
    let config = shared::models::repo::config(&s.app.db, model).await.unwrap().unwrap();
    shared::models::usage::UsageRecord::new(&config, None, "chat")
}

/// A complete answer of `content`.
fn complete(content: &str) -> shared::agents::conversation_repo::FinishedAnswer<'_> {
    shared::agents::conversation_repo::FinishedAnswer {
        content,
        thinking: "",
        tool_calls: json!([]),
        tool_call_count: 0,
        status: 1,
        error: None,
        prompt_tokens: 1,
        completion_tokens: 1,
        duration_ms: 1,
    }
}

/// The answer's final statement run again after it committed (its reply lost with its
/// connection, and the turn retrying) stores the turn's model usage once, not twice.
#[tokio::test]
async fn an_answer_stored_twice_counts_its_usage_once() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Counted", "chatModelId": model }))
        .await;
    s.chat(&s.admin, agent, say("counted", "hello")).await.events();
    let before = usage_rows(&s).await;
    let (answer, content): (i64, String) =
        sqlx::query_as("SELECT id, content FROM messages WHERE role = 'assistant' ORDER BY id DESC LIMIT 1")
            .fetch_one(&s.app.db)
            .await
            .unwrap();
    let records = [call_of(&s, model).await];
    let again =
        shared::agents::conversation_repo::finish_assistant_message(&s.app.db, answer, &complete(&content), &records)
            .await
            .unwrap();
    assert!(again, "the message is there, written as it was");
    assert_eq!(usage_rows(&s).await, before, "its usage was stored the first time");
}

/// An answer finished while its conversation is being deleted: the final statement waits for
/// the delete, then finds the message gone; it reports so (the stream's `error` line) and still
/// stores the turn's usage, as the calls were made. Read from the statement's snapshot, the
/// message still looked there: `done` was sent for a deleted message and the usage was lost.
#[tokio::test]
async fn an_answer_finished_while_its_conversation_is_deleted_keeps_its_usage() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Deleted", "chatModelId": model }))
        .await;
    s.chat(&s.admin, agent, say("going", "hello")).await.events();
    let (answer, conversation): (i64, i64) = sqlx::query_as(
        "UPDATE messages SET status = 0 WHERE id = (SELECT max(id) FROM messages WHERE role = 'assistant')
         RETURNING id, conversation_id",
    )
    .fetch_one(&s.app.db)
    .await
    .unwrap();
    let before = usage_rows(&s).await;
    let records = [call_of(&s, model).await];
    let late = complete("late");
    let finish = shared::agents::conversation_repo::finish_assistant_message(&s.app.db, answer, &late, &records);
    let stored = api_tests::while_deleted(&s.app.db, "conversations", conversation, finish).await;
    assert!(!stored.unwrap(), "the message is gone");
    assert_eq!(usage_rows(&s).await, before + 1, "its usage is stored all the same");
}

/// Seeds messages at fixed times: (days ago, owner, role, tool calls, duration ms).
/// Stores messages `days_ago` UTC days back, early in the day but never in the future: a
/// message stamped later than now falls outside every period that ends now.
async fn seed(s: &ChatSetup, agent: i64, rows: &[(i32, i64, &str, i32, i64)]) {
    for (days_ago, user, role, tools, ms) in rows {
        let conversation: i64 = sqlx::query_scalar(
            "INSERT INTO conversations (agent_id, user_id, conversation_key, create_dt)
             VALUES ($1, $2, $3, LEAST(date_trunc('day', now(), 'UTC') - make_interval(days => $4) + interval '1 hour', now()))
             ON CONFLICT (agent_id, user_id, conversation_key) WHERE user_id IS NOT NULL
             DO UPDATE SET title = conversations.title RETURNING id",
        )
        .bind(agent)
        .bind(user)
        .bind(format!("day-{days_ago}"))
        .bind(days_ago)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO messages (conversation_id, agent_id, role, content, tool_call_count, duration_ms, create_dt)
             VALUES ($1, $2, $3, 'x', $4, $5,
               LEAST(date_trunc('day', now(), 'UTC') - make_interval(days => $6) + interval '2 hours', now()))",
        )
        .bind(conversation)
        .bind(agent)
        .bind(role)
        .bind(tools)
        .bind(if *role == "assistant" { Some(*ms) } else { None })
        .bind(days_ago)
        .execute(&s.app.db)
        .await
        .unwrap();
    }
}

/// The expected trends name days, so seeding and asking must happen on the same UTC day.
async fn wait_out_midnight() {
    let now = chrono::Utc::now();
    let left = 86_400 - i64::from(now.num_seconds_from_midnight());
    if left < 60 {
        tokio::time::sleep(Duration::from_secs(left as u64 + 1)).await;
    }
}

#[tokio::test]
async fn analytics_match_hand_computed_numbers() {
    let s = ChatSetup::new().await;
    wait_out_midnight().await;
    let (alice, _) = s.app.regular_user("alice").await;
    let (bob, bob_token) = s.app.regular_user("bob").await;
    let agent = s.agent(&s.admin, json!({ "name": "Measured" })).await;
    seed(
        &s,
        agent,
        &[
            (0, alice, "user", 0, 0),
            (0, alice, "assistant", 2, 1000),
            (0, bob, "user", 0, 0),
            (0, bob, "assistant", 1, 3000),
            (2, alice, "user", 0, 0),
            (2, alice, "assistant", 0, 2000),
            (10, bob, "user", 0, 0),
            (10, bob, "assistant", 4, 500),
        ],
    )
    .await;

    let r = s
        .app
        .get(&format!("/agent/{agent}/analytics?range=7d"), Some(&s.admin))
        .await;
    let a = r.assert_ok();
    assert_eq!(a["activeUsers"], 2);
    assert_eq!(a["conversationCount"], 3, "alice today, bob today, alice two days ago");
    assert_eq!(a["totalMessages"], 6);
    assert_eq!(a["totalToolCalls"], 3);
    assert_eq!(a["avgResponseTime"], 2000.0, "(1000 + 3000 + 2000) / 3");
    assert_eq!(a["messageTrend"], json!([0, 0, 0, 0, 2, 0, 4]));
    assert_eq!(a["toolCallTrend"], json!([0, 0, 0, 0, 0, 0, 3]));
    assert_eq!(a["activeUsersTrend"], json!([0, 0, 0, 0, 1, 0, 2]));
    assert_eq!(a["conversationCountTrend"], json!([0, 0, 0, 0, 1, 0, 2]));
    assert_eq!(a["dateLabels"].as_array().unwrap().len(), 7);

    let r = s
        .app
        .get(&format!("/agent/{agent}/analytics?range=30d"), Some(&s.admin))
        .await;
    let a = r.assert_ok();
    assert_eq!(a["totalMessages"], 8);
    assert_eq!(a["totalToolCalls"], 7);
    assert_eq!(a["messageTrend"].as_array().unwrap().len(), 30);
    assert_eq!(a["messageTrend"][19], 2, "ten days ago");

    let r = s
        .app
        .get(&format!("/agent/{agent}/analytics?range=1d"), Some(&s.admin))
        .await;
    assert_eq!(r.assert_ok()["dateLabels"].as_array().unwrap().len(), 24);
    s.app
        .get(&format!("/agent/{agent}/analytics?range=custom"), Some(&s.admin))
        .await
        .assert_error(400, 0, "start is required");
    s.app
        .get(&format!("/agent/{agent}/analytics?range=week"), Some(&s.admin))
        .await
        .assert_error(400, 0, "range must be");
    s.app
        .get(&format!("/agent/{agent}/analytics"), Some(&bob_token))
        .await
        .assert_error(403, 403, "creator");

    let r = s.app.get(&format!("/agent/{agent}/usage-detail"), Some(&s.admin)).await;
    let page = r.assert_ok();
    assert_eq!(page["total"], 2);
    let rows = page["data"].as_array().unwrap();
    assert_eq!(rows[0]["messageCount"], 2);
    assert_eq!(rows[1]["messageCount"], 2);
    let names: Vec<&str> = rows.iter().map(|r| r["userName"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob"]);
    assert_eq!(rows[0]["department"], "");
}

async fn skill(s: &ChatSetup, name: &str, instructions: &str) -> i64 {
    let r = s
        .app
        .post(
            "/skill",
            Some(&s.admin),
            &json!({ "name": name, "description": format!("{name} skill") }),
        )
        .await;
    let id = r.assert_status_ok()["id"].as_i64().unwrap();
    let md = format!("---\nname: {name}\ndescription: {name} skill\n---\n{instructions}");
    s.app
        .put(
            &format!("/skill/{id}/files/content?path=SKILL.md"),
            Some(&s.admin),
            &json!({ "content": md }),
        )
        .await
        .assert_status_ok();
    s.app
        .post(
            &format!("/skill/{id}/files"),
            Some(&s.admin),
            &json!({ "path": "notes/ports.md", "type": "file" }),
        )
        .await
        .assert_status_ok();
    s.app
        .put(
            &format!("/skill/{id}/files/content?path=notes/ports.md"),
            Some(&s.admin),
            &json!({ "content": "Port Royal is the home port." }),
        )
        .await
        .assert_status_ok();
    id
}

#[tokio::test]
async fn two_bound_skills_of_one_name_are_told_apart() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-agent", json!({})).await;
    let first = skill(&s, "pirate", "Answer like a pirate: start with ARRR.").await;
    let second = skill(&s, "pirate", "Answer like a navy officer: start with AYE.").await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Twins", "chatModelId": model, "skillEnabled": true, "skillIds": [first, second] }),
        )
        .await;
    let load = |id: i64| format!("CALL load_skill {{\"name\": \"pirate #{id}\"}}");
    let events = s.chat(&s.admin, agent, say("t-1", &load(second))).await.events();
    assert_eq!(
        joined(&events, "text"),
        "Tool said: Answer like a navy officer: start with AYE."
    );
    let events = s.chat(&s.admin, agent, say("t-2", &load(first))).await.events();
    assert_eq!(
        joined(&events, "text"),
        "Tool said: Answer like a pirate: start with ARRR."
    );
    let asked = s.models.requests().into_iter().find(|r| r["stream"] == true).unwrap();
    let system = asked["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.contains(&format!("- pirate #{first}: pirate skill"))
            && system.contains(&format!("- pirate #{second}: pirate skill")),
        "{system}"
    );
}

#[tokio::test]
async fn the_model_loads_a_skill_and_follows_it_and_disabled_skills_are_not_offered() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-agent", json!({})).await;
    let pirate = skill(&s, "pirate", "Answer like a pirate: start with ARRR.").await;
    let other = skill(&s, "poet", "Rhyme.").await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Skilled", "chatModelId": model, "skillEnabled": true, "skillIds": [pirate, other] }),
        )
        .await;
    let detail = s.app.get(&format!("/agent/{agent}"), Some(&s.admin)).await;
    let skills = detail.assert_ok()["skills"].clone();
    assert_eq!(skills[0]["name"], "pirate");
    assert_eq!(skills[1]["id"], other);

    let events = s
        .chat(&s.admin, agent, say("s-1", "CALL load_skill {\"name\": \"pirate\"}"))
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"]);
    assert_eq!(events[1]["ok"], true);
    assert_eq!(
        joined(&events, "text"),
        "Tool said: Answer like a pirate: start with ARRR."
    );
    // The skills were listed in the system prompt, their instructions were not.
    let first = s.models.requests().into_iter().find(|r| r["stream"] == true).unwrap();
    let system = first["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(
        system.contains("- pirate: pirate skill") && !system.contains("ARRR"),
        "{system}"
    );

    let events = s
        .chat(
            &s.admin,
            agent,
            say(
                "s-2",
                "CALL read_skill_file {\"skill\": \"pirate\", \"path\": \"notes/ports.md\"}",
            ),
        )
        .await
        .events();
    assert_eq!(joined(&events, "text"), "Tool said: Port Royal is the home port.");

    let body = json!({ "conversationId": "s-3", "content": "CALL load_skill {\"name\": \"pirate\"}",
        "disabledSkillIds": [pirate, other] });
    let events = s.chat(&s.admin, agent, body).await.events();
    assert_eq!(joined(&events, "text"), "Tool load_skill is not available");

    s.app
        .put(
            &format!("/agent/{agent}"),
            Some(&s.admin),
            &json!({ "skillIds": [999_999] }),
        )
        .await
        .assert_error(400, 0, "skillIds");
    // Deleting a skill unbinds it.
    s.app
        .delete(&format!("/skill/{other}"), Some(&s.admin))
        .await
        .assert_status_ok();
    let detail = s.app.get(&format!("/agent/{agent}"), Some(&s.admin)).await;
    assert_eq!(detail.assert_ok()["skillIds"], json!([pirate]));
}

/// An agent offers an MCP server only while its creator may use it: an administrator's shared
/// server, bound by a regular user, is no longer offered once that administrator is demoted.
#[tokio::test]
async fn a_shared_server_whose_creator_was_demoted_is_no_longer_offered() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-agent", json!({})).await;
    let (bob_id, bob) = s.app.regular_user("bob").await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let role = |id: i64, role: i16| {
        let db = s.app.db.clone();
        async move {
            sqlx::query("UPDATE users SET role = $2 WHERE id = $1")
                .bind(id)
                .bind(role)
                .execute(&db)
                .await
                .unwrap();
        }
    };
    role(bob_id, 1).await;
    let tools = api_tests::mcp_servers::guarded(&["none"]).await;
    let body = json!({ "name": "bobs", "transportType": 2, "endpoint": tools.url("/mcp") });
    let server = s
        .app
        .post("/mcp-server", Some(&bob), &body)
        .await
        .assert_ok()
        .as_i64()
        .unwrap();
    let agent = s
        .agent(
            &alice,
            json!({ "name": "Adder", "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [server] }),
        )
        .await;
    let add = |key: &'static str| say(key, "CALL add {\"a\": 2, \"b\": 3}");
    let events = s.chat(&alice, agent, add("d-1")).await.events();
    assert_eq!(joined(&events, "text"), "Tool said: 5", "{events:?}");
    role(bob_id, 2).await;
    let events = s.chat(&alice, agent, add("d-2")).await.events();
    assert_eq!(joined(&events, "text"), "Tool add is not available", "{events:?}");
}

#[tokio::test]
async fn the_model_calls_mcp_tools_and_answers_with_their_results() {
    let commands = api_tests::mcp_servers::stdio_commands();
    let s = ChatSetup::with(
        api_tests::Store::Filesystem,
        &api_tests::mcp_servers::with_stdio(&commands, &[]),
    )
    .await;
    let t = Some(s.admin.as_str());
    let model = s.chat_model("chat-agent", json!({})).await;
    let server = s.everything_server().await;
    let bad = s
        .app
        .post(
            "/agent",
            t,
            &json!({ "name": "x", "mcpEnabled": true, "mcpServerIds": [999_999] }),
        )
        .await;
    bad.assert_error(400, 0, "mcpServerIds: MCP server 999999");
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Tooled", "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [server] }),
        )
        .await;
    let detail = s.app.get(&format!("/agent/{agent}"), t).await;
    assert_eq!(detail.assert_ok()["mcpServers"][0]["id"], server);
    assert_eq!(detail.assert_ok()["mcpServers"][0]["name"], "everything");

    let events = s
        .chat(&s.admin, agent, say("m-1", "CALL get-sum {\"a\": 19, \"b\": 23}"))
        .await
        .events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"]);
    assert_eq!(events[0]["name"], format!("mcp{server}__get-sum"));
    assert_eq!(events[0]["serverId"], server);
    assert_eq!(events[0]["arguments"], json!({ "a": 19, "b": 23 }));
    assert_eq!(events[1]["ok"], true);
    let text = joined(&events, "text");
    assert!(text.starts_with("Tool said: ") && text.contains("42"), "{text}");
    let stored = messages(&s, &s.admin, agent, "m-1").await;
    assert_eq!(stored[1]["toolCalls"][0]["serverId"], server);

    let events = s
        .chat(&s.admin, agent, say("m-2", "CALL echo {\"message\": \"hello tools\"}"))
        .await
        .events();
    assert!(joined(&events, "text").contains("hello tools"));

    // An answer stopped by its token limit right after its calls: the last one's arguments
    // may have been cut (even to a valid ""), so it is not run; the ones before it are.
    let cut = "CALL echo {\"message\": \"first\"}\nCALL echo {\"message\": \"second\"}\nCUT";
    let events = s.chat(&s.admin, agent, say("m-2b", cut)).await.events();
    assert_eq!(
        kinds(&events).iter().filter(|k| **k == "tool_call").count(),
        1,
        "{events:?}"
    );
    assert_eq!(events[0]["arguments"], json!({ "message": "first" }));
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");

    let off = json!({ "conversationId": "m-3", "content": "CALL echo {\"message\": \"x\"}", "disabledMcpServerIds": [server] });
    let events = s.chat(&s.admin, agent, off).await.events();
    assert_eq!(joined(&events, "text"), "Tool echo is not available");
    let analytics = s.app.get(&format!("/agent/{agent}/analytics?range=1d"), t).await;
    assert_eq!(analytics.assert_ok()["totalToolCalls"], 3);

    // Tools start only in the first half of a turn's time (here 10 s): a call still running
    // past it leaves the rest unrun and the turn answers, where hanging tools used to run it
    // into its limit with no answer. The instance's pool is warmed first, so the server's
    // start is not counted in the turn.
    let short = s
        .app
        .instance_with(|c| c.chat_turn_timeout = Duration::from_secs(10))
        .await;
    let warm = s
        .app
        .send(
            s.app
                .client
                .get(format!("{short}/mcp-server/{server}/tools"))
                .header("Svc-Auth", &s.admin),
        )
        .await;
    warm.assert_ok();
    let slow = "CALL trigger-long-running-operation {\"duration\": 6, \"steps\": 1}\nCALL echo {\"message\": \"late\"}";
    let body = json!({ "conversationId": "m-4", "content": slow });
    let reply = s
        .app
        .send(
            s.app
                .client
                .post(format!("{short}/agent/{agent}/chat"))
                .header("Svc-Auth", &s.admin)
                .json(&body),
        )
        .await;
    let events = api_tests::chat::ndjson(std::str::from_utf8(&reply.bytes).unwrap());
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    assert_eq!(kinds(&events).iter().filter(|k| **k == "tool_call").count(), 1);
    // The turn's last model call (a title's may come after it) carried both calls' answers.
    let answered: Vec<Value> = s
        .models
        .requests()
        .into_iter()
        .filter(|r| {
            r["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
        })
        .collect();
    let results: Vec<&str> = answered.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        results
            .last()
            .unwrap()
            .starts_with("not run: this turn's time for tools is spent"),
        "{results:?}"
    );
}

/// With the base's `questionRewrite`, a chat's follow-up is rewritten by the agent's model
/// into a standalone question, from the conversation so far, and the base is searched with
/// that, as Q&A does; a first message, with no history, is searched as written. Without it,
/// "and how long for that?" searched the base literally.
#[tokio::test]
async fn a_chat_follow_up_is_rewritten_for_retrieval_when_the_base_says_so() {
    const REWRITE: &str = "Rewrite the user's last question";
    let s = ChatSetup::new().await;
    let chat = s.chat_model("chat-echo", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let files = [(
        "refunds.txt",
        b"Refunds are accepted within 30 days of purchase with a receipt.".to_vec(),
    )];
    let kb = s.indexed_base(embedding, &files).await;
    let rewrite_on = json!({ "searchParams": { "questionRewrite": true } });
    s.app
        .put(&format!("/rag/{kb}/config"), Some(&s.admin), &rewrite_on)
        .await
        .assert_ok();
    // Three messages of history: from the third turn on, the window begins with an answer.
    let body = json!({ "name": "Support", "chatModelId": chat, "ragEnabled": true, "ragId": kb,
                       "shortTermMemorySize": 3 });
    let agent = s.agent(&s.admin, body).await;
    let is_rewrite = |r: &Value| {
        r["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with(REWRITE))
    };
    let embedded = |r: &Value, text: &str| r["model"] == "emb-8" && r["input"].to_string().contains(text);

    s.chat(&s.admin, agent, say("rw-1", "are refunds accepted"))
        .await
        .events();
    assert!(
        !s.models.requests().iter().any(is_rewrite),
        "a first message is not rewritten"
    );
    let before = s.models.requests().len();
    let events = s
        .chat(&s.admin, agent, say("rw-1", "and how long for that?"))
        .await
        .events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    let turn: Vec<Value> = s.models.requests()[before..].to_vec();
    let rewrite = turn
        .iter()
        .find(|r| is_rewrite(r))
        .expect("the follow-up was rewritten");
    let messages = rewrite["messages"].as_array().unwrap();
    assert!(
        rewrite["messages"].to_string().contains("are refunds accepted")
            && messages.last().unwrap()["content"] == "and how long for that?",
        "{rewrite}"
    );
    // The scripted model answers "You said: <question>": that is what was searched.
    assert!(
        turn.iter().any(|r| embedded(r, "You said: and how long for that?")),
        "{turn:?}"
    );

    // The rewrite is sent the conversation as the answer's call is, roles taking turns from
    // a user's message: templates of strict alternation refuse anything else.
    let before = s.models.requests().len();
    s.chat(&s.admin, agent, say("rw-1", "and with no receipt?"))
        .await
        .events();
    let turn: Vec<Value> = s.models.requests()[before..].to_vec();
    let rewrite = turn
        .iter()
        .find(|r| is_rewrite(r))
        .expect("the third message was rewritten");
    let roles: Vec<&str> = rewrite["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{rewrite}");
}

/// A knowledge base on `embedding` holding `files`, every one indexed.
/// An agent with a knowledge base answers from it: the chunks retrieved for the question reach
/// the model's system prompt (seen at the scripted model), numbered.
#[tokio::test]
async fn a_chat_with_a_knowledge_base_puts_the_retrieved_chunks_into_the_prompt() {
    let s = ChatSetup::new().await;
    let chat = s.chat_model("chat-echo", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let files = [
        (
            "refunds.txt",
            b"Refunds are accepted within 30 days of purchase with a receipt.".to_vec(),
        ),
        (
            "shipping.txt",
            b"Parcels ship from Lisbon every weekday before noon.".to_vec(),
        ),
    ];
    let kb = s.indexed_base(embedding, &files).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Support", "chatModelId": chat, "ragEnabled": true, "ragId": kb }),
        )
        .await;
    s.chat(&s.admin, agent, say("kb-1", "refunds accepted within how many days"))
        .await
        .events();
    let request = s
        .models
        .requests()
        .into_iter()
        .find(|r| r["model"] == "chat-echo" && r["messages"].to_string().contains("refunds accepted within"))
        .expect("the chat reached the model");
    let system = request["messages"][0]["content"]
        .as_str()
        .expect("a system prompt")
        .to_owned();
    assert!(
        system.contains("Use the following knowledge when it is relevant to the question:")
            && system.contains("[1] Refunds are accepted within 30 days of purchase with a receipt."),
        "the retrieved chunk, numbered, in the prompt: {system}"
    );

    // A user with less left than a full answer's reserve (8,192 tokens) gets the knowledge
    // too: the turn held the whole reserve first, and retrieval found the quota empty.
    let (bob_id, bob) = s.app.regular_user("bob").await;
    s.set_quota(bob_id, 6_000).await;
    let events = s
        .chat(&bob, agent, say("kb-2", "parcels ship from which city"))
        .await
        .events();
    assert_eq!(kinds(&events).last().unwrap(), "done", "{events:?}");
    assert!(!kinds(&events).iter().any(|k| k == "warning"), "{events:?}");
    let request = s
        .models
        .requests()
        .into_iter()
        .find(|r| r["model"] == "chat-echo" && r["messages"].to_string().contains("parcels ship from"))
        .expect("bob's chat reached the model");
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .is_some_and(|p| p.contains("Parcels ship from Lisbon")),
        "{request}"
    );
}

#[tokio::test]
async fn chat_rounds_feed_long_term_memory_and_later_turns_recall_it_per_user() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let chat = s.chat_model("chat-echo", json!({})).await;
    let extractor = s.chat_model("mem-extract", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let config = s
        .app
        .post(
            "/memory/config",
            t,
            &json!({ "name": "chat memory", "embeddingModelId": embedding, "extractionModelId": extractor,
                     "extractionInterval": 1 }),
        )
        .await;
    let config = config.assert_ok().as_i64().unwrap();
    s.app
        .post(
            "/agent",
            t,
            &json!({ "name": "x", "memoryEnabled": true, "memoryConfigId": 999_999 }),
        )
        .await
        .assert_error(400, 0, "memoryConfigId: memory config 999999 does not exist");
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Remembers", "chatModelId": chat, "memoryEnabled": true, "memoryConfigId": config }),
        )
        .await;

    s.chat(
        &s.admin,
        agent,
        say("mem-1", "PREFERENCE: Drinks | The user drinks green tea"),
    )
    .await
    .events();
    let mut memories = Value::Null;
    for _ in 0..100 {
        memories = s
            .app
            .get(&format!("/memory/agent/{agent}"), t)
            .await
            .assert_ok()
            .clone();
        if memories.as_array().is_some_and(|m| !m.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(memories[0]["title"], "Drinks", "extracted after the round: {memories}");
    assert_eq!(memories[0]["memoryType"], "PREFERENCE");

    s.chat(&s.admin, agent, say("mem-2", "which drinks do I like"))
        .await
        .events();
    let system_of = |needle: &str| {
        s.models
            .requests()
            .into_iter()
            .filter(|r| r["model"] == "chat-echo" && r["stream"] == true)
            .find(|r| r["messages"].to_string().contains(needle))
            .map(|r| {
                r["messages"][0]["content"]
                    .as_str()
                    .expect("a system prompt")
                    .to_owned()
            })
            .unwrap_or_else(|| panic!("no chat request to the model holds {needle:?}"))
    };
    let system = system_of("which drinks do I like");
    assert!(
        system.contains("Drinks: The user drinks green tea"),
        "recalled into the prompt: {system}"
    );

    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    s.chat(&alice, agent, say("mem-3", "which drinks does alice like"))
        .await
        .events();
    let system = system_of("which drinks does alice like");
    assert!(
        !system.contains("green tea"),
        "another user's memories never come back: {system}"
    );
}

/// The spec's three image formats are accepted as attachments and reach the model with their
/// own MIME type: JPG and WEBP as well as PNG (whose path the rules test walks).
#[tokio::test]
async fn jpg_and_webp_attachments_reach_the_model_as_what_they_are() {
    // A JFIF header (start of image, APP0 "JFIF", end of image): the service knows images by
    // their magic numbers and never decodes them.
    const JPG: &[u8] = &[
        0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01,
        0x00, 0x00, 0xFF, 0xD9,
    ];
    // A whole 1x1 lossless WEBP.
    const WEBP: &[u8] = &[
        b'R', b'I', b'F', b'F', 0x1A, 0x00, 0x00, 0x00, b'W', b'E', b'B', b'P', b'V', b'P', b'8', b'L', 0x0D, 0x00,
        0x00, 0x00, 0x2F, 0x00, 0x00, 0x00, 0x10, 0x07, 0x10, 0x11, 0x11, 0x88, 0x88, 0xFE, 0x07, 0x00,
    ];
    let s = ChatSetup::new().await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    let vision = s
        .chat_model("chat-echo", json!({ "configJson": { "capabilities": ["vision"] } }))
        .await;
    let agent = s
        .agent(&s.admin, json!({ "name": "Seeing", "chatModelId": vision }))
        .await;
    for (name, bytes, mime) in [("photo.jpg", JPG, "image/jpeg"), ("photo.webp", WEBP, "image/webp")] {
        let uploaded = s
            .app
            .upload_resource(&alice, name, bytes.to_vec(), Some(("chat", "1")))
            .await;
        let r = uploaded.assert_ok();
        assert_eq!(r["mimeType"], mime, "{name}");
        let id = r["id"].as_i64().unwrap();
        let body = json!({ "conversationId": name, "content": "look", "attachments": [image(id)] });
        let events = s.chat(&alice, agent, body).await.events();
        assert_eq!(events.last().unwrap()["type"], "done", "{name}: {events:?}");
        let sent = s.models.requests().into_iter().rfind(|r| r["stream"] == true).unwrap();
        let parts = sent["messages"].as_array().unwrap().last().unwrap()["content"].clone();
        assert!(
            parts[1]["image_url"]["url"]
                .as_str()
                .unwrap()
                .starts_with(&format!("data:{mime};base64,")),
            "{name}: {parts}"
        );
    }
}

/// When the agent's knowledge base cannot be searched or its memories cannot be recalled, the
/// answer goes on without them and the stream says so: one `warning` line for each, naming it,
/// before the answer (the log has the details). Nothing of the kind when they work.
#[tokio::test]
async fn a_chat_whose_knowledge_or_memory_fails_says_so_and_answers_without_them() {
    let s = ChatSetup::new().await;
    let t = Some(s.admin.as_str());
    let chat = s.chat_model("chat-echo", json!({})).await;
    let embedding = s.embedding_model("emb-8").await;
    let kb = s
        .indexed_base(
            embedding,
            &[("refunds.txt", b"Refunds are accepted within 30 days.".to_vec())],
        )
        .await;
    let config = s.memory_config(embedding).await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Grounded", "chatModelId": chat, "ragEnabled": true, "ragId": kb,
                    "memoryEnabled": true, "memoryConfigId": config }),
        )
        .await;
    let warnings = |events: &[Value]| -> Vec<(String, String)> {
        events
            .iter()
            .filter(|e| e["type"] == "warning")
            .map(|e| {
                (
                    e["source"].as_str().unwrap().to_owned(),
                    e["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let fine = s.chat(&s.admin, agent, say("w-1", "refunds?")).await.events();
    assert!(warnings(&fine).is_empty(), "{fine:?}");

    // The embedding model both need is switched off.
    s.app
        .put(&format!("/ai-model/config/{embedding}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    let events = s.chat(&s.admin, agent, say("w-2", "refunds?")).await.events();
    let mut said = warnings(&events);
    said.sort();
    assert_eq!(said.len(), 2, "{events:?}");
    assert_eq!((said[0].0.as_str(), said[1].0.as_str()), ("knowledge", "memory"));
    assert!(
        said[0].1.contains("the knowledge base could not be searched"),
        "{said:?}"
    );
    assert!(
        said[1].1.contains("long-term memories could not be recalled"),
        "{said:?}"
    );
    assert_eq!(events.last().unwrap()["type"], "done", "the answer goes on: {events:?}");
    assert!(joined(&events, "text").starts_with("You said: "), "{events:?}");
}

/// An MCP server that cannot list its tools costs the turn that server's tools only: the
/// others' are offered, and the stream says which server was left out (its reason, which may
/// name internal addresses, goes to the log and to the server's test).
#[tokio::test]
async fn a_chat_whose_mcp_server_fails_says_so_and_keeps_the_other_servers_tools() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-agent", json!({})).await;
    let tools = api_tests::mcp_servers::guarded(&["none"]).await;
    let working = s
        .mcp_server(json!({ "name": "adder", "transportType": 2, "endpoint": tools.url("/mcp") }))
        .await;
    let closed = format!("http://127.0.0.1:{}/mcp", api_tests::free_port());
    let broken = s
        .mcp_server(json!({ "name": "gone", "transportType": 2, "endpoint": closed }))
        .await;
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "Adder", "chatModelId": model, "mcpEnabled": true, "mcpServerIds": [broken, working] }),
        )
        .await;
    let events = s
        .chat(&s.admin, agent, say("mcp-w", "CALL add {\"a\": 2, \"b\": 3}"))
        .await
        .events();
    assert_eq!(joined(&events, "text"), "Tool said: 5", "{events:?}");
    let warned: Vec<&Value> = events.iter().filter(|e| e["type"] == "warning").collect();
    assert_eq!(warned.len(), 1, "{events:?}");
    assert_eq!(warned[0]["source"], "mcp");
    let message = warned[0]["message"].as_str().unwrap();
    let named = format!("the tools of MCP server {broken} could not be listed");
    assert!(message.contains(&named), "{message}");
    assert!(!message.contains("127.0.0.1"), "the reason stays in the log: {message}");
    // Someone else chatting with the agent is told that tools were left out, not which
    // servers (the ids are the service's own).
    let (bob_id, bob) = s.app.regular_user("bob").await;
    s.set_quota(bob_id, 100_000).await;
    let events = s
        .chat(&bob, agent, say("mcp-w-bob", "CALL add {\"a\": 2, \"b\": 3}"))
        .await
        .events();
    assert_eq!(joined(&events, "text"), "Tool said: 5", "{events:?}");
    let warned: Vec<&Value> = events.iter().filter(|e| e["type"] == "warning").collect();
    assert_eq!(warned.len(), 1, "{events:?}");
    let message = warned[0]["message"].as_str().unwrap();
    assert!(message.starts_with("1 of this agent's tool servers"), "{message}");
    assert!(!message.contains("MCP server"), "no server is named: {message}");
}

/// An attachment is read no larger than the limit even when its object grew after the upload
/// was registered (an upload URL stays valid for a while): the turn ends with an error line
/// instead of reading the whole object into memory.
#[tokio::test]
async fn an_image_that_grew_after_its_upload_is_not_read() {
    let s = ChatSetup::new().await;
    let (agent, png) = seeing_agent_and_image(&s).await;
    let key: String = sqlx::query_scalar("SELECT storage_key FROM resources WHERE id = $1")
        .bind(png)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    let mut grown = PNG.to_vec();
    grown.resize(11 * 1024 * 1024, 0);
    s.app
        .state
        .storage()
        .put(&key, grown.into(), "image/png")
        .await
        .unwrap();
    let body = json!({ "conversationId": "g-1", "content": "look", "attachments": [image(png)] });
    let events = s.chat(&s.admin, agent, body).await.events();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{events:?}");
    assert!(
        last["message"].as_str().unwrap().contains("has grown past 10.0 MB"),
        "{last}"
    );
    assert!(s.models.requests().is_empty(), "the model was not called");
}

/// A quota that can pay for the question but not for the model call (the agent's long
/// instruction with it): the turn starts and the call is refused when it is sized; the stream's
/// `error` line carries the refusal's code (403), not the 500 of a server failure.
#[tokio::test]
async fn a_model_call_the_quota_cannot_pay_ends_with_its_own_code() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let instruction = "Answer briefly and politely. ".repeat(100);
    let agent = s
        .agent(
            &s.admin,
            json!({ "name": "A", "chatModelId": model, "instruction": instruction }),
        )
        .await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 60).await;
    let events = s
        .chat(&alice, agent, say("q", "a question of a few words"))
        .await
        .events();
    let last = events.last().unwrap();
    assert_eq!(
        (&last["type"], &last["code"]),
        (&json!("error"), &json!(403)),
        "{events:?}"
    );
    assert!(last["message"].as_str().unwrap().contains("quota is used up"), "{last}");
}

/// A quota with tokens left, but fewer than the question needs, is refused before anything is
/// stored, and keeps its tokens.
#[tokio::test]
async fn a_quota_that_cannot_pay_for_the_question_stores_nothing() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "A", "chatModelId": model })).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 5).await;
    let before = s.app.snapshot().await;
    let question = "a question of rather more than five tokens, whatever the tokenizer";
    s.chat(&alice, agent, say("q", question)).await.refused().assert_error(
        403,
        403,
        "5 tokens left, this request needs about",
    );
    // Given back before the answer: a task of its own may never run under Lambda once the
    // refusal is answered.
    assert_eq!(s.app.snapshot().await, before, "nothing stored, nothing spent");
    assert!(s.models.requests().is_empty(), "the model was not called");
}

/// A conversation deleted while its turn is being answered: the answer has nowhere to go, and
/// the stream ends with an error line, not a `done` naming a message that does not exist.
#[tokio::test]
async fn a_conversation_deleted_mid_answer_ends_with_an_error_line() {
    let s = ChatSetup::new().await;
    let slow = s.chat_model("chat-slow", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": slow })).await;
    let chat = s.chat(&s.admin, agent, say("gone", "one two three"));
    let delete = async {
        // Once the turn is stored and its answer under way, however long that took.
        let started = async || s.app.count("messages WHERE role = 'assistant' AND status = 0").await > 0;
        api_tests::wait_for(Duration::from_secs(60), started).await;
        sqlx::query("DELETE FROM conversations WHERE conversation_key = 'gone'")
            .execute(&s.app.db)
            .await
            .unwrap()
            .rows_affected()
    };
    let (reply, deleted) = tokio::join!(chat, delete);
    assert_eq!(deleted, 1, "the conversation was there to delete");
    let events = reply.events();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{events:?}");
    assert!(last["message"].as_str().unwrap().contains("was deleted"), "{last}");
    assert!(!events.iter().any(|e| e["type"] == "done"), "{events:?}");
}

/// Turns with images, many at once on a small pool: each looks its images up before it takes
/// the conversation's lock (and its connection), so they cannot all hold a connection while
/// waiting for another.
#[tokio::test]
async fn turns_with_images_at_once_do_not_starve_a_small_pool() {
    let s = ChatSetup::with(api_tests::Store::Filesystem, &[("DB_MAX_CONNECTIONS", "2")]).await;
    let (agent, png) = seeing_agent_and_image(&s).await;
    let body =
        |i: usize| json!({ "conversationId": format!("pool-{i}"), "content": "look", "attachments": [image(png)] });
    let replies = futures::future::join_all((0..4).map(|i| s.chat(&s.admin, agent, body(i)))).await;
    for reply in replies {
        let events = reply.events();
        assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    }
}

/// Two turns with images sent at once to one conversation take turns: the images it holds are
/// counted for each after the other stored its own, so together they cannot pass the limit.
#[tokio::test]
async fn concurrent_turns_with_images_keep_the_conversations_limit() {
    let s = ChatSetup::new().await;
    let (agent, png) = seeing_agent_and_image(&s).await;
    let other = upload(&s, &s.admin, "other.png", PNG).await;
    for round in 0..5 {
        let body = json!({ "conversationId": format!("pair-{round}"), "content": "look",
                           "attachments": [image(png), image(other)] });
        let (a, b) = tokio::join!(
            s.chat(&s.admin, agent, body.clone()),
            s.chat(&s.admin, agent, body.clone())
        );
        let streamed = [a, b]
            .into_iter()
            .filter(|r| match r {
                ChatReply::Events(_) => true,
                ChatReply::Refused(refusal) => {
                    refusal.assert_error(400, 0, "at most 3 images");
                    false
                }
            })
            .count();
        assert_eq!(streamed, 1, "round {round}: one turn of two images, not two");
    }
}

/// The conversation "held" with one turn, its row locked by the returned transaction: the next
/// turn's statement waits until it ends.
async fn held(s: &ChatSetup, agent: i64) -> sqlx::Transaction<'static, sqlx::Postgres> {
    s.chat(&s.admin, agent, say("held", "the first question"))
        .await
        .events();
    let mut lock = s.app.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM conversations WHERE conversation_key = 'held' FOR UPDATE")
        .execute(&mut *lock)
        .await
        .unwrap();
    lock
}

/// Returns once the next turn's statement waits for a lock the test holds (`held`'s, or one its
/// trigger takes) and the model has been asked something holding `needle` meanwhile.
async fn asked_while_blocked(s: &ChatSetup, needle: &str) {
    api_tests::until_a_statement_waits_for_a_lock(&s.app.db).await;
    let asked = async || s.asked_with(needle).is_some();
    api_tests::wait_for(Duration::from_secs(30), asked).await;
}

/// A turn without images calls its model while its own statement stores it, one round trip
/// sooner, and answers only once it is stored. Here the statement waits for a lock the test
/// holds on the conversation's row: the model is asked (with the history, read with the agent)
/// before the lock is let go, and no response has begun by then.
#[tokio::test]
async fn the_model_is_called_while_the_turn_is_stored_and_the_answer_waits_for_it() {
    let s = ChatSetup::new().await;
    let model = s.chat_model("chat-echo", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "A", "chatModelId": model })).await;
    let lock = held(&s, agent).await;
    let responded = std::sync::atomic::AtomicBool::new(false);
    let chat = async {
        let resp = s
            .app
            .client
            .post(s.app.url(&format!("/agent/{agent}/chat")))
            .header("Svc-Auth", &s.admin)
            .json(&say("held", "the second question"))
            .send()
            .await
            .unwrap();
        responded.store(true, std::sync::atomic::Ordering::SeqCst);
        api_tests::chat::ndjson(&resp.text().await.unwrap())
    };
    let release = async {
        asked_while_blocked(&s, "the second question").await;
        assert!(
            !responded.load(std::sync::atomic::Ordering::SeqCst),
            "no response before the turn is stored"
        );
        lock.commit().await.unwrap();
    };
    let (events, ()) = tokio::join!(chat, release);
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    assert_eq!(joined(&events, "text"), "You said: the second question");
    let second = s.asked_with("the second question").unwrap();
    assert!(
        second.contains("the first question"),
        "the history went with it: {second}"
    );
    let stored = messages(&s, &s.admin, agent, "held").await;
    let statuses: Vec<_> = stored
        .iter()
        .map(|m| (m["role"].clone(), m["status"].clone()))
        .collect();
    assert_eq!(
        statuses,
        [
            (json!("user"), json!(1)),
            (json!("assistant"), json!(1)),
            (json!("user"), json!(1)),
            (json!("assistant"), json!(1)),
        ]
    );
}

/// A turn whose statement fails after its model call began (here a trigger refuses its message
/// once the test lets it go, after the model was asked) answers with the error and no stream,
/// and its task stores nothing afterwards: the call is recorded as one whose client went away,
/// and charged to the quota, before the request answers.
#[tokio::test]
async fn a_turn_that_cannot_be_stored_is_refused_and_its_model_call_leaves_nothing_behind() {
    let s = ChatSetup::new().await;
    let slow = s.chat_model("chat-slow", json!({})).await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": slow })).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, 100_000).await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_message() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock(7); RAISE EXCEPTION 'no room for this message'; END $$;
         CREATE TRIGGER refuse_message BEFORE INSERT ON messages FOR EACH ROW
         WHEN (NEW.content = 'cannot be stored') EXECUTE FUNCTION refuse_message();
         CREATE FUNCTION slow_usage() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
         CREATE TRIGGER slow_usage BEFORE INSERT ON model_usage FOR EACH ROW EXECUTE FUNCTION slow_usage();
         CREATE FUNCTION slower_settlement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$;
         CREATE TRIGGER slower_settlement BEFORE UPDATE OF tokens ON users FOR EACH ROW
         WHEN (NEW.tokens <> OLD.tokens) EXECUTE FUNCTION slower_settlement();",
    )
    .execute(&s.app.db)
    .await
    .unwrap();
    let mut gate = s.app.db.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(7)")
        .execute(&mut *gate)
        .await
        .unwrap();
    let chat = s.chat(&alice, agent, say("nowhere", "cannot be stored"));
    let release = async {
        asked_while_blocked(&s, "cannot be stored").await;
        sqlx::query("SELECT pg_advisory_unlock(7)")
            .execute(&mut *gate)
            .await
            .unwrap();
    };
    let (reply, ()) = tokio::join!(chat, release);
    let reply = reply.refused();
    assert_eq!(reply.status, 500, "{}", reply.body);
    // Recorded and settled before the answer, though the settlement (begun when the call was
    // stopped) takes longer than the record: under Lambda nothing may run after the answer.
    assert_eq!(
        s.app.count("model_usage").await,
        1,
        "the model call was not recorded in time"
    );
    let (error, used): (Option<String>, i64) =
        sqlx::query_as("SELECT error, prompt_tokens + completion_tokens FROM model_usage")
            .fetch_one(&s.app.db)
            .await
            .unwrap();
    assert!(error.unwrap_or_default().contains("went away"));
    let tokens: i64 = sqlx::query_scalar("SELECT tokens FROM users WHERE id = $1")
        .bind(alice_id)
        .fetch_one(&s.app.db)
        .await
        .unwrap();
    assert_eq!(tokens, 100_000 - used, "the held tokens were not settled in time");
    assert_eq!(s.app.count("conversations").await, 0);
    assert_eq!(s.app.count("messages").await, 0);
}

/// The history a turn sends is read from the caller's own conversation only: another user with
/// the same conversationId starts afresh. Both ways a chat learns its user: authenticated by
/// the statement that counts the request, and, with rate limits off, before it.
#[tokio::test]
async fn a_turn_reads_its_history_only_from_its_users_own_conversation() {
    for vars in [&[][..], &[("RATE_LIMIT_USER_REQUESTS", "0")][..]] {
        let s = ChatSetup::with(api_tests::Store::Filesystem, vars).await;
        let model = s.chat_model("chat-echo", json!({})).await;
        let agent = s.agent(&s.admin, json!({ "name": "A", "chatModelId": model })).await;
        let (alice_id, alice) = s.app.regular_user("alice").await;
        s.set_quota(alice_id, 100_000).await;
        s.chat(&s.admin, agent, say("topic", "the admin's secret"))
            .await
            .events();
        s.chat(&alice, agent, say("topic", "alice asks")).await.events();
        // The key as the turn stores it: a padded one is the same conversation.
        s.chat(&s.admin, agent, say(" topic ", "the admin again"))
            .await
            .events();
        let asked = |q: &str| s.asked_with(q).unwrap();
        assert!(
            !asked("alice asks").contains("secret"),
            "{vars:?}: {}",
            asked("alice asks")
        );
        assert!(asked("the admin again").contains("the admin's secret"), "{vars:?}");
    }
}

/// Tools wait until the turn is stored: a tool may act outside the service, and a turn whose
/// statement then failed would be answered with an error and sent again. The model asks for
/// web search while the turn's statement waits for a lock the test holds; the tool's answer
/// goes to the model only after the lock is let go.
#[tokio::test]
async fn tools_wait_until_the_turn_is_stored() {
    let s = ChatSetup::new().await;
    let (_, agent) = searcher(&s).await;
    let lock = held(&s, agent).await;
    let tool_answered = || s.asked_with("\"role\":\"tool\"").is_some();
    let chat = s.chat(
        &s.admin,
        agent,
        say("held", "CALL web_search {\"query\": \"rust lambda\"}"),
    );
    let release = async {
        asked_while_blocked(&s, "CALL web_search").await;
        // Time for the search and the second model call, were they not waiting.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!tool_answered(), "no tool ran before the turn was stored");
        lock.commit().await.unwrap();
    };
    let (reply, ()) = tokio::join!(chat, release);
    let events = reply.events();
    assert_eq!(kinds(&events)[..2], ["tool_call", "tool_result"]);
    assert_eq!(events.last().unwrap()["type"], "done", "{events:?}");
    assert!(tool_answered());
}
