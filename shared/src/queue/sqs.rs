//! SQS queue, and a poller that feeds the same worker handler the Lambda runtime would call.

use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName};

use super::{event, failed_ids, message, with_origin, BatchHandler, Origin, Queue, QueueName, BATCH_SIZE, REQUEST_ID};

#[derive(Clone)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    ingest_url: String,
    memory_url: String,
}

impl SqsQueue {
    pub fn new(sdk: &aws_config::SdkConfig, ingest_url: String, memory_url: String) -> Self {
        Self {
            client: aws_sdk_sqs::Client::new(sdk),
            ingest_url,
            memory_url,
        }
    }

    fn url(&self, queue: QueueName) -> &str {
        match queue {
            QueueName::Ingest => &self.ingest_url,
            QueueName::Memory => &self.memory_url,
        }
    }

    /// One receive -> handle -> delete round. Failed messages are left alone: they come back
    /// after the visibility timeout and SQS moves them to the DLQ after maxReceiveCount.
    async fn poll_once(&self, queue: QueueName, handler: &BatchHandler) -> anyhow::Result<()> {
        let url = self.url(queue);
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(BATCH_SIZE as i32)
            .wait_time_seconds(10)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_attribute_names(crate::telemetry::TRACEPARENT)
            .message_attribute_names(REQUEST_ID)
            .send()
            .await
            .context("sqs receive_message")?;
        let received = out.messages.unwrap_or_default();
        if received.is_empty() {
            return Ok(());
        }
        let records = received
            .iter()
            .map(|m| {
                let count = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(1);
                let attribute = |name: &str| {
                    m.message_attributes()
                        .and_then(|a| a.get(name))
                        .and_then(|a| a.string_value().map(str::to_owned))
                };
                let origin = Origin {
                    traceparent: attribute(crate::telemetry::TRACEPARENT),
                    request_id: attribute(REQUEST_ID),
                };
                let received = message(
                    m.message_id().unwrap_or_default(),
                    m.body().unwrap_or_default(),
                    count,
                    m.receipt_handle.clone(),
                );
                with_origin(received, &origin)
            })
            .collect();
        let ev = event(records);
        let outcome = handler(ev.clone(), None).await;
        let failed = failed_ids(&ev, &outcome);
        let done: Vec<_> = ev
            .records
            .iter()
            .filter(|m| m.message_id.as_ref().is_some_and(|id| !failed.contains(id)))
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .set_receipt_handle(m.receipt_handle.clone())
                    .build()
                    .ok()
            })
            .collect();
        if !done.is_empty() {
            self.client
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(done))
                .send()
                .await
                .context("sqs delete_message_batch")?;
        }
        Ok(())
    }
}

#[async_trait]
impl Queue for SqsQueue {
    async fn send(&self, queue: QueueName, tenant: &str, body: String) -> anyhow::Result<()> {
        self.client
            .send_message()
            .queue_url(self.url(queue))
            .message_group_id(tenant)
            .message_body(body)
            .set_message_attributes(origin_attributes())
            .send()
            .await
            .context("sqs send_message")?;
        Ok(())
    }

    async fn check(&self) -> anyhow::Result<()> {
        self.client
            .get_queue_attributes()
            .queue_url(&self.ingest_url)
            .send()
            .await
            .context("sqs get_queue_attributes")?;
        Ok(())
    }

    fn start_worker(&self, queue: QueueName, handler: BatchHandler) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(err) = this.poll_once(queue, &handler).await {
                    tracing::warn!(?queue, error = ?err, "sqs poll failed; retrying");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        })
    }
}

/// Where the message is sent from (`Origin`) as its attributes.
fn origin_attributes() -> Option<std::collections::HashMap<String, MessageAttributeValue>> {
    let origin = Origin::current();
    let attributes: std::collections::HashMap<String, MessageAttributeValue> = origin
        .attributes()
        .filter_map(|(name, value)| {
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .ok()?;
            Some((name.to_owned(), value))
        })
        .collect();
    (!attributes.is_empty()).then_some(attributes)
}
