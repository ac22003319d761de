//! Token quotas under concurrent chats: tokens are held before each model call and settled to
//! what it used, so concurrent turns can never spend more than the quota.

use api_tests::chat::{say, ChatReply, ChatSetup};
use futures::future::join_all;
use serde_json::json;

#[tokio::test]
async fn concurrent_chats_never_spend_more_than_the_quota_and_the_refused_store_nothing() {
    const QUOTA: i64 = 400;
    const CHATS: usize = 12;
    let s = ChatSetup::new().await;
    // Slow answers keep every turn's tokens held while the others arrive.
    let model = s
        .chat_model("chat-slow", json!({ "configJson": { "maxTokens": 40 } }))
        .await;
    let agent = s.agent(&s.admin, json!({ "name": "Slow", "chatModelId": model })).await;
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.set_quota(alice_id, QUOTA).await;

    let replies = join_all((0..CHATS).map(|i| {
        let (s, alice) = (&s, &alice);
        async move {
            (
                i,
                s.chat(alice, agent, say(&format!("q-{i}"), "tell me four words")).await,
            )
        }
    }))
    .await;

    let mut answered = vec![];
    let mut refused = vec![];
    for (i, reply) in replies {
        match reply {
            ChatReply::Events(events) => answered.push((i, events)),
            ChatReply::Refused(r) => {
                r.assert_error(403, 403, "token quota is used up");
                refused.push(i);
            }
        }
    }
    assert!(
        !answered.is_empty() && !refused.is_empty(),
        "answered {} refused {}",
        answered.len(),
        refused.len()
    );
    // The answered ones ran to the end (their hold covered the whole turn).
    for (i, events) in &answered {
        assert_eq!(events.last().unwrap()["type"], "done", "chat {i}: {events:?}");
    }
    // Every model call was capped at what it held.
    assert!(s
        .models
        .requests()
        .iter()
        .all(|r| r["max_tokens"].as_u64().is_some_and(|m| m <= 40)));
    // Refused chats stored nothing: no conversation, no message.
    let keys: Vec<String> = sqlx::query_scalar("SELECT conversation_key FROM conversations ORDER BY conversation_key")
        .fetch_all(&s.app.db)
        .await
        .unwrap();
    let mut expected: Vec<String> = answered.iter().map(|(i, _)| format!("q-{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(s.app.count("messages").await, 2 * answered.len() as i64);

    // Background settling (titles, stream meters) finishes within moments; on a loaded
    // machine it can take seconds, so wait up to 15 s for it (the assertions are unchanged).
    let mut last = (i64::MIN, i64::MIN);
    for _ in 0..150 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = s.tokens_left_and_used(alice_id).await;
        if now == last && now.0 + now.1 == QUOTA {
            break;
        }
        last = now;
    }
    let (left, used) = last;
    assert!(left >= 0, "tokens left {left}");
    assert!(used <= QUOTA, "the model calls used {used} tokens of a {QUOTA} quota");
    assert_eq!(
        QUOTA - left,
        used,
        "charged exactly what the calls used, every hold settled"
    );
    println!(
        "quota {QUOTA}: {} of {CHATS} concurrent chats answered, {} refused, {used} tokens used, {left} left",
        answered.len(),
        refused.len()
    );
}
