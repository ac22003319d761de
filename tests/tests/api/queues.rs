//! The same worker handler behind the in-process queue and behind SQS (LocalStack): good
//! messages are handled once, a failing one is retried and ends in the dead-letter queue.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageSystemAttributeName;
use shared::queue::{for_each_message, BatchHandler, InProcessQueue, Queue, QueueName, SqsQueue, MAX_RECEIVES};

type Seen = Arc<Mutex<Vec<(String, u32)>>>;

/// Records every delivery (body, receive count); fails bodies starting with "bad".
fn recording_worker(seen: Seen) -> BatchHandler {
    Arc::new(move |event, stop_at| {
        let seen = seen.clone();
        Box::pin(async move {
            Ok(for_each_message(event, stop_at, |m| {
                let seen = seen.clone();
                async move {
                    let body = m.body.clone().unwrap_or_default();
                    let count = m
                        .attributes
                        .get("ApproximateReceiveCount")
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    seen.lock().unwrap().push((body.clone(), count));
                    if body.starts_with("bad") {
                        anyhow::bail!("cannot handle {body}");
                    }
                    Ok(())
                }
            })
            .await)
        })
    })
}

/// Work still running when its batch must stop is reported failed (retried as usual); work
/// done by then is not, and the answer comes at the stop, not when the slow work would end.
#[tokio::test]
async fn messages_unfinished_at_the_stop_are_reported_failed() {
    let event = shared::queue::event(vec![
        shared::queue::message("quick", "quick", 1, None),
        shared::queue::message("slow", "slow", 1, None),
    ]);
    let started = Instant::now();
    let stop_at = tokio::time::Instant::now() + Duration::from_millis(300);
    let answer = for_each_message(event, Some(stop_at), |m| async move {
        if m.body.as_deref() == Some("slow") {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Ok(())
    })
    .await;
    let failed: Vec<&str> = answer
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["slow"]);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "condition not reached within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn deliveries(seen: &Seen, body: &str) -> Vec<u32> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(b, _)| b == body)
        .map(|(_, c)| *c)
        .collect()
}

#[tokio::test]
async fn in_process_queue_retries_and_dead_letters() {
    let queue = InProcessQueue::with_retry_delay(Duration::from_millis(50));
    let seen: Seen = Arc::default();
    for body in ["good-1", "bad-1", "good-2"] {
        queue.send(QueueName::Ingest, "user:1", body.to_owned()).await.unwrap();
    }
    queue.start_worker(QueueName::Ingest, recording_worker(seen.clone()));
    wait_until(Duration::from_secs(10), || {
        !queue.dead_letters(QueueName::Ingest).is_empty()
    })
    .await;
    assert_eq!(deliveries(&seen, "good-1"), vec![1]);
    assert_eq!(deliveries(&seen, "good-2"), vec![1]);
    assert_eq!(deliveries(&seen, "bad-1"), (1..=MAX_RECEIVES).collect::<Vec<_>>());
    assert_eq!(queue.dead_letters(QueueName::Ingest), vec!["bad-1".to_owned()]);
    assert!(queue.dead_letters(QueueName::Memory).is_empty());
}

#[tokio::test]
async fn sqs_queue_retries_and_dead_letters() {
    let api_tests::TestQueue { url, dlq_url: dlq } = api_tests::fresh_sqs_queue(1).await;
    let sdk = aws_config::load_from_env().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue = SqsQueue::new(&sdk, url.clone(), url.clone());
    for (tenant, body) in [("user:1", "good-1"), ("user:2", "bad-1"), ("user:1", "good-2")] {
        queue.send(QueueName::Ingest, tenant, body.to_owned()).await.unwrap();
    }
    let seen: Seen = Arc::default();
    let worker = queue.start_worker(QueueName::Ingest, recording_worker(seen.clone()));
    wait_until(Duration::from_secs(60), || {
        deliveries(&seen, "bad-1").len() >= MAX_RECEIVES as usize
    })
    .await;
    // Give SQS time to move it: the next receive after the last failure redrives it.
    let start = Instant::now();
    let dead = loop {
        let out = sqs
            .receive_message()
            .queue_url(&dlq)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if let Some(m) = out.messages.unwrap_or_default().into_iter().next() {
            // Sent as its tenant's: a fair queue's group.
            let group = m
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            break (m.body.unwrap_or_default(), group);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "message never reached the DLQ"
        );
    };
    worker.abort();
    assert_eq!(dead, ("bad-1".to_owned(), Some("user:2".to_owned())));
    assert_eq!(deliveries(&seen, "good-1"), vec![1], "handled once and deleted");
    assert_eq!(deliveries(&seen, "good-2"), vec![1]);
    assert_eq!(deliveries(&seen, "bad-1"), (1..=MAX_RECEIVES).collect::<Vec<_>>());
    sqs.delete_queue().queue_url(&url).send().await.unwrap();
    sqs.delete_queue().queue_url(&dlq).send().await.unwrap();
}
