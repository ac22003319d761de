//! In-process queue on Tokio channels, with SQS's redelivery and dead-letter behaviour.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{
    event, failed_ids, message, with_origin, BatchHandler, Origin, Queue, QueueName, BATCH_SIZE, MAX_RECEIVES,
};

#[derive(Debug, Clone)]
struct Envelope {
    id: String,
    body: String,
    receives: u32,
    origin: Origin,
}

struct Channel {
    tx: mpsc::UnboundedSender<Envelope>,
    rx: Option<mpsc::UnboundedReceiver<Envelope>>,
}

#[derive(Clone)]
pub struct InProcessQueue {
    channels: Arc<Mutex<HashMap<QueueName, Channel>>>,
    dead: Arc<Mutex<Vec<(QueueName, String)>>>,
    retry_delay: Duration,
}

impl Default for InProcessQueue {
    fn default() -> Self {
        Self::with_retry_delay(Duration::from_secs(2))
    }
}

impl InProcessQueue {
    pub fn with_retry_delay(retry_delay: Duration) -> Self {
        Self {
            channels: Arc::default(),
            dead: Arc::default(),
            retry_delay,
        }
    }

    fn sender(&self, queue: QueueName) -> mpsc::UnboundedSender<Envelope> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry(queue)
            .or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                Channel { tx, rx: Some(rx) }
            })
            .tx
            .clone()
    }

    /// Bodies of messages that failed `MAX_RECEIVES` times.
    pub fn dead_letters(&self, queue: QueueName) -> Vec<String> {
        let dead = self.dead.lock().unwrap_or_else(|p| p.into_inner());
        dead.iter()
            .filter(|(q, _)| *q == queue)
            .map(|(_, b)| b.clone())
            .collect()
    }
}

#[async_trait]
impl Queue for InProcessQueue {
    /// First in, first out whatever the tenant: one process serves one deployment's tests or
    /// one developer.
    async fn send(&self, queue: QueueName, _tenant: &str, body: String) -> anyhow::Result<()> {
        let envelope = Envelope {
            id: uuid::Uuid::new_v4().to_string(),
            body,
            receives: 0,
            origin: Origin::current(),
        };
        self.sender(queue)
            .send(envelope)
            .map_err(|_| anyhow::anyhow!("in-process queue closed"))
    }

    async fn check(&self) -> anyhow::Result<()> {
        Ok(())
    }

    fn start_worker(&self, queue: QueueName, handler: BatchHandler) -> tokio::task::JoinHandle<()> {
        let tx = self.sender(queue);
        let rx = {
            let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
            channels.get_mut(&queue).and_then(|c| c.rx.take())
        };
        let this = self.clone();
        tokio::spawn(async move {
            let Some(mut rx) = rx else {
                tracing::error!(?queue, "a worker is already attached to this queue");
                return;
            };
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < BATCH_SIZE {
                    match rx.try_recv() {
                        Ok(more) => batch.push(more),
                        Err(_) => break,
                    }
                }
                for m in &mut batch {
                    m.receives += 1;
                }
                let ev = event(
                    batch
                        .iter()
                        .map(|m| with_origin(message(&m.id, &m.body, m.receives, None), &m.origin))
                        .collect(),
                );
                let outcome = handler(ev.clone(), None).await;
                let failed = failed_ids(&ev, &outcome);
                for m in batch.into_iter().filter(|m| failed.contains(&m.id)) {
                    this.redeliver(queue, m, tx.clone());
                }
            }
        })
    }
}

impl InProcessQueue {
    fn redeliver(&self, queue: QueueName, m: Envelope, tx: mpsc::UnboundedSender<Envelope>) {
        if m.receives >= MAX_RECEIVES {
            tracing::error!(?queue, message_id = %m.id, "message moved to the dead-letter list");
            self.dead
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((queue, m.body));
            return;
        }
        let delay = self.retry_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(m);
        });
    }
}
