//! The daily clean-up (the housekeeping function, an EventBridge schedule): expired upload
//! previews and their files, files of previews never saved, uploads nobody registered (files on disk; S3's lifecycle rule
//! expires its own), refresh tokens of dead logins, stale login counters, client nodes
//! long offline and uncollected kicks, memory expiry, answers whose turn ended without
//! storing them, documents whose processing stopped, and vector indexes of deleted bases.
//! Each job is one function of its own domain module; this runs them all, so one failing does
//! not keep the others from running.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::AppState;

/// How long a node stays listed as offline after its lease lapsed, and how long a kick waits
/// for its node's next heartbeat.
pub const NODE_RETENTION: Duration = Duration::from_secs(7 * 86400);

/// What one run removed or archived.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub upload_previews: u64,
    pub unsaved_preview_files: u64,
    pub staged_uploads: u64,
    pub refresh_tokens: u64,
    pub login_counters: u64,
    pub client_nodes: u64,
    pub node_kicks: u64,
    pub archived_memories: u64,
    pub abandoned_answers: u64,
    pub stalled_documents: u64,
    pub leftover_objects: u64,
    pub orphan_indexes: u64,
}

/// How long a presigned upload may wait for its registration: as long as S3's lifecycle rule
/// gives a staged object (`infra/template.yaml`); its URL lasts 15 minutes.
const STAGED_UPLOAD_AGE: Duration = Duration::from_secs(86400);

/// A document in processing whose lease ran out this long ago is past every redelivery (three
/// receives, 18 minutes apart at most): its last message went to the dead-letter queue.
const STALLED_AFTER: Duration = Duration::from_secs(6 * 3600);

/// An answer still generating this long after its turn began had its process end under it (a
/// crash, or Lambda's timeout with CHAT_TURN_TIMEOUT_SECS set above it): no turn runs longer
/// than its time limit, and the hour added covers clocks and the last statement.
fn abandoned_after(state: &AppState) -> Duration {
    state.config().chat_turn_timeout + Duration::from_secs(3600)
}

/// Runs every job; fails, after all have run, when any of them failed. The jobs that only
/// change rows go first: the ones that delete files take time in proportion to the files
/// (storage calls), and a run that reaches its time limit among them has done the others.
/// Within the file jobs, previews and unsaved preview files go before the noted objects,
/// whose retry deletes the files they note.
pub async fn run(state: &AppState) -> anyhow::Result<Swept> {
    let db = state.db();
    let mut failed = Vec::new();
    let refresh_tokens = done(
        &mut failed,
        "refresh tokens",
        crate::users::repo::purge_expired_families(db).await,
    );
    let login_counters = done(
        &mut failed,
        "login counters",
        crate::users::throttle::purge_stale(db, state.config().login_lock).await,
    );
    let client_nodes = done(
        &mut failed,
        "client nodes",
        crate::apps::node_repo::purge_lapsed(db, NODE_RETENTION).await,
    );
    let node_kicks = done(
        &mut failed,
        "node kicks",
        crate::apps::node_repo::purge_stale_kicks(db, NODE_RETENTION).await,
    );
    let archived_memories = done(
        &mut failed,
        "memory expiry",
        crate::memory::lifecycle::archive_expired(db).await,
    );
    let abandoned_answers = done(
        &mut failed,
        "abandoned answers",
        crate::agents::conversation_repo::fail_abandoned(db, abandoned_after(state)).await,
    );
    let stalled_documents = done(
        &mut failed,
        "stalled documents",
        crate::rag::documents::repo::fail_stalled(db, STALLED_AFTER).await,
    );
    let orphan_indexes = done(
        &mut failed,
        "orphan vector indexes",
        crate::rag::bases::service::drop_orphan_indexes(state).await,
    );
    let upload_previews = done(
        &mut failed,
        "upload previews",
        crate::rag::documents::upload::expire_previews(state)
            .await
            .map(|n| n as u64),
    );
    let unsaved_preview_files = done(
        &mut failed,
        "unsaved preview files",
        crate::rag::documents::upload::sweep_unsaved(state).await,
    );
    let staged_uploads = done(
        &mut failed,
        "staged uploads",
        state.storage().expire_staged(STAGED_UPLOAD_AGE).await,
    );
    let leftover_objects = done(
        &mut failed,
        "leftover objects",
        crate::resources::leftovers::retry(state).await,
    );
    let swept = Swept {
        upload_previews,
        unsaved_preview_files,
        staged_uploads,
        refresh_tokens,
        login_counters,
        client_nodes,
        node_kicks,
        archived_memories,
        abandoned_answers,
        stalled_documents,
        leftover_objects,
        orphan_indexes,
    };
    tracing::info!(?swept, "housekeeping done");
    if failed.is_empty() {
        Ok(swept)
    } else {
        Err(anyhow::anyhow!("housekeeping jobs failed: {}", failed.join(", ")))
    }
}

/// A job's count, or 0 with the job named among the failed. The error is logged whole, its
/// causes included: shown as text, a storage failure read only "object storage".
fn done<E: std::fmt::Debug>(failed: &mut Vec<&'static str>, job: &'static str, outcome: Result<u64, E>) -> u64 {
    match outcome {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(job, error = ?e, "housekeeping job failed");
            failed.push(job);
            0
        }
    }
}

/// The scheduled entry point, as `lambda::run_scheduled` takes it.
pub fn job(state: AppState) -> BoxFuture<'static, anyhow::Result<()>> {
    Box::pin(async move { run(&state).await.map(|_| ()) })
}
