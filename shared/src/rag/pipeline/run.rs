//! One document run through the stages, with progress, timings and a precise failure.

use std::time::Instant;

use serde_json::{json, Value};
use uuid::Uuid;

use super::IngestMessage;
use crate::models::client::InputKind;
use crate::models::gateway::{self, Billing, CallError};
use crate::models::ModelType;
use crate::queue::StopAt;
use crate::rag::bases::{self, KbRow};
use crate::rag::chunk::{self, Chunk};
use crate::rag::document::ParsedDocument;
use crate::rag::documents::repo as doc_repo;
use crate::rag::documents::DocRow;
use crate::rag::extparse::ExtparseError;
use crate::rag::parse::{self, ParseOptions};
use crate::rag::smart::{self, NotChunked};
use crate::resources::leftovers;
use crate::storage::StorageError;
use crate::AppState;

/// Texts embedded per call between progress updates.
const EMBED_GROUP: usize = 64;

/// Why a run stopped early.
enum Stop {
    /// The document cannot be processed as it is: mark it failed, do not retry.
    Permanent { stage: &'static str, message: String },
    /// Worth another delivery (storage or model endpoint hiccup).
    Transient { stage: &'static str, error: anyhow::Error },
    /// The document was deleted or given a newer run: what this one would still do (paid
    /// model calls among it) is waste.
    Superseded,
    /// The run did not finish within its invocation's time (`took`).
    OutOfTime { took: std::time::Duration },
}

fn permanent(stage: &'static str, message: impl Into<String>) -> Stop {
    Stop::Permanent {
        stage,
        message: message.into(),
    }
}

pub async fn run(state: &AppState, msg: &IngestMessage, last_attempt: bool, stop_at: StopAt) -> anyhow::Result<()> {
    let db = state.db();
    let Some(doc) = doc_repo::find(db, msg.document_id).await? else {
        return Ok(()); // deleted meanwhile
    };
    if doc.run_id != msg.run_id || matches!(doc.status.as_str(), "success" | "failed") {
        return Ok(()); // superseded by a newer run, or this run already finished
    }
    // The status again: the run may have finished (its lease ended with it) since the read
    // above, and a redelivered message would run it once more, paid, over any edits since.
    // Whether the lease taken over was left to run out while parsing: released by every way a
    // run ends, it lapses only when its worker died.
    let leased: Option<bool> = sqlx::query_scalar(
        "UPDATE documents d SET lease_until = now() + make_interval(secs => $3), updated_at = now()
         FROM (SELECT id, status, lease_until FROM documents WHERE id = $1 FOR UPDATE) before
         WHERE d.id = before.id AND d.run_id = $2 AND (d.lease_until IS NULL OR d.lease_until < now())
           AND d.status NOT IN ('success', 'failed')
         RETURNING before.lease_until IS NOT NULL AND before.status = 'parsing'",
    )
    .bind(doc.id)
    .bind(doc.run_id)
    .bind(lease_secs(state))
    .fetch_optional(db)
    .await?;
    let Some(died_parsing) = leased else {
        anyhow::bail!(
            "document {} is being processed by another worker, or has just finished",
            doc.id
        );
    };
    if died_parsing {
        // Parsing is the same work on the same bytes each time: a file that took a worker's
        // memory (or crashed its parser) would do it again on every delivery, then wait hours
        // in `parsing` for the stalled-documents job.
        let message = "a worker stopped while parsing this file (out of memory, or the parser crashed) and it is \
                       not tried again: split the file, or save it anew (for a PDF, print it to a new PDF) and \
                       upload it again";
        tracing::warn!(
            document_id = doc.id,
            "document failed: its worker died while parsing it"
        );
        doc_repo::mark_failed(db, doc.id, doc.run_id, "parsing", message).await?;
        return Ok(());
    }
    let Some(kb) = bases::repo::find_to_use(db, doc.rag_id).await? else {
        return Ok(());
    };
    match stages_in_time(state, &doc, &kb, stop_at).await {
        Ok(()) => Ok(()),
        Err(Stop::Superseded) => {
            tracing::info!(
                document_id = doc.id,
                "the document was deleted or reprocessed meanwhile: run stopped"
            );
            Ok(())
        }
        Err(Stop::OutOfTime { took }) => {
            let message = format!(
                "processing did not finish in the {} one worker run may take; split the document into smaller \
                 files, or reprocess it",
                minutes_and_seconds(took)
            );
            tracing::warn!(document_id = doc.id, %message, "document failed");
            doc_repo::fail_at_stage(db, doc.id, doc.run_id, &message).await?;
            Ok(())
        }
        Err(Stop::Permanent { stage, message }) => {
            tracing::warn!(document_id = doc.id, stage, %message, "document failed");
            doc_repo::mark_failed(db, doc.id, doc.run_id, stage, &message).await?;
            Ok(())
        }
        Err(Stop::Transient { stage, error }) if last_attempt => {
            // The document now says why: a message sent on to the dead-letter queue would
            // only hold a run that is over, which a redrive could not start again.
            let message = format!("gave up after repeated failures: {}", told(&error));
            tracing::warn!(document_id = doc.id, stage, error = %format!("{error:#}"), "document failed");
            doc_repo::mark_failed(db, doc.id, doc.run_id, stage, &message).await?;
            Ok(())
        }
        Err(Stop::Transient { stage, error }) => {
            sqlx::query("UPDATE documents SET lease_until = NULL WHERE id = $1 AND run_id = $2")
                .bind(doc.id)
                .bind(doc.run_id)
                .execute(db)
                .await?;
            Err(error.context(format!("document {} failed at {stage}", doc.id)))
        }
    }
}

/// What the base's owner reads of a failure worth retrying: its outermost message (which store,
/// which stage), or only that the service's database failed. The whole chain, with addresses
/// and what a store answered, is in the worker's log.
fn told(error: &anyhow::Error) -> String {
    match crate::error::database_failed(error) {
        true => "the service's database failed".to_owned(),
        false => error.to_string(),
    }
}

fn lease_secs(state: &AppState) -> f64 {
    state.config().ingest_lease.as_secs_f64()
}

/// Renews the lease while a parse runs, which reports no progress of its own: a parse longer
/// than the lease let a duplicate delivery take the document over, and a lease that lapsed
/// while parsing now means the worker died (`run`). Returns only when the run was replaced.
async fn keep_parsing_lease(state: &AppState, doc: &DocRow) -> Stop {
    let period = state.config().ingest_lease / 3;
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        // A passing failure leaves the lease two more periods for the next renewal.
        if let Err(Stop::Superseded) = set_stage(state, doc, "parsing", 5).await {
            return Stop::Superseded;
        }
    }
}

/// Pictures read between two checks that the run is still the document's (`set_stage`).
const OCR_GROUP: usize = 8;

/// Records progress and renews the lease: a worker that stops reporting loses the document,
/// and a run the document no longer has, or that another delivery of its message finished,
/// stops (and leaves the finished document's status as it is).
async fn set_stage(state: &AppState, doc: &DocRow, status: &'static str, progress: i32) -> Result<(), Stop> {
    let updated = sqlx::query(
        "UPDATE documents SET status = $3, progress = $4, lease_until = now() + make_interval(secs => $5),
         updated_at = now() WHERE id = $1 AND run_id = $2 AND status NOT IN ('success', 'failed')",
    )
    .bind(doc.id)
    .bind(doc.run_id)
    .bind(status)
    .bind(progress)
    .bind(lease_secs(state))
    .execute(state.db())
    .await
    .map_err(|e| Stop::Transient {
        stage: status,
        error: e.into(),
    })?;
    match updated.rows_affected() {
        0 => Err(Stop::Superseded),
        _ => Ok(()),
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// What a run keeps of its invocation for its final write (chunks, images and the document's
/// status, in one transaction) or, when its time is up before, for marking its document failed.
const WRITE_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs the stages, the ones before the final write until `WRITE_MARGIN` before `stop_at`. A
/// document whose parsing, chunking, embedding, reading of pictures and storing of them did not
/// finish within a whole invocation would not in the next one either: it fails for good, at
/// the stage it was in, instead of being killed with its invocation, delivered again to be
/// killed again, and left in processing until the daily job gives up on it. The pictures are
/// stored before the margin too: one upload each, hundreds of them took the final write past
/// the invocation's end. The final write is not cut: a statement dropped half way still runs in
/// Postgres and holds the document's row, which the failure would then wait for.
async fn stages_in_time(state: &AppState, doc: &DocRow, kb: &KbRow, stop_at: StopAt) -> Result<(), Stop> {
    let before_write = async {
        let prepared = prepare(state, doc, kb).await?;
        let image_keys = store_images(state, doc, &prepared.parsed)
            .await
            .map_err(|error| Stop::Transient {
                stage: "indexing",
                error,
            })?;
        Ok((prepared, image_keys))
    };
    let (prepared, image_keys) = match stop_at {
        None => before_write.await?,
        Some(stop_at) => {
            let started = Instant::now();
            let until = stop_at
                .checked_sub(WRITE_MARGIN)
                .unwrap_or_else(tokio::time::Instant::now);
            if until <= tokio::time::Instant::now() {
                // An invocation this short (a function timeout under the margins) gets nothing
                // done: the message goes back rather than failing a document never tried.
                return Err(Stop::Transient {
                    stage: "parsing",
                    error: anyhow::anyhow!("the invocation had no time left for the document"),
                });
            }
            tokio::time::timeout_at(until, before_write).await.unwrap_or_else(|_| {
                Err(Stop::OutOfTime {
                    took: started.elapsed(),
                })
            })?
        }
    };
    index(state, doc, kb, prepared, image_keys).await
}

fn minutes_and_seconds(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs / 60 {
        0 => format!("{:.1} s", d.as_secs_f64()),
        m => format!("{m} min {} s", secs % 60),
    }
}

/// What the stages before the final write made, to be written in one transaction.
struct Prepared {
    parsed: ParsedDocument,
    chunks: Vec<Chunk>,
    vectors: Vec<Vec<f32>>,
    /// Text read from each parsed image (imageOcr), in image order.
    ocr: Vec<Option<String>>,
    timings: Value,
    started: Instant,
}

/// Parses, chunks, embeds and reads the pictures: the stages that call models.
async fn prepare(state: &AppState, doc: &DocRow, kb: &KbRow) -> Result<Prepared, Stop> {
    let started = Instant::now();
    set_stage(state, doc, "parsing", 5).await?;
    let t = Instant::now();
    let parsed = tokio::select! {
        biased;
        parsed = parse_document(state, doc, kb) => parsed,
        stop = keep_parsing_lease(state, doc) => Err(stop),
    }?;
    let parse_ms = ms(t);

    set_stage(state, doc, "chunking", 30).await?;
    let t = Instant::now();
    let chunk_settings = &kb.chunk_params.0;
    let params = chunk_settings
        .params()
        .map_err(|e| permanent("chunking", e.to_string()))?;
    let mut smart_fallback = None;
    let smart = if chunk_settings.mode == "smart" {
        // Each window renews the lease and stops a replaced run, as the pictures' groups do.
        let before_window = || set_stage(state, doc, "chunking", 30);
        let by_model = (chunk_settings.chunk_model_id, doc.payer());
        match smart::chunk(state, by_model, &parsed, &params, before_window).await {
            Ok(chunks) => Some(chunks),
            Err(NotChunked::Stopped(stop)) => return Err(stop),
            Err(NotChunked::Fallback(reason)) => {
                tracing::warn!(document_id = doc.id, %reason, "smart chunking fell back to the structure-aware rules");
                smart_fallback = Some(reason);
                None
            }
        }
    } else {
        None
    };
    let chunks = match smart {
        Some(chunks) => chunks,
        None => chunk::chunk(&parsed, &params).map_err(|e| permanent("chunking", e.to_string()))?,
    };
    if chunks.is_empty() {
        return Err(permanent("chunking", "the document produced no text to index"));
    }
    let chunk_ms = ms(t);

    set_stage(state, doc, "embedding", 40).await?;
    let t = Instant::now();
    let vectors = embed(state, doc, kb, &chunks).await?;
    let embed_ms = ms(t);

    let t = Instant::now();
    let ocr = if chunk_settings.image_ocr {
        let mut ocr = Vec::with_capacity(parsed.images.len());
        for group in parsed.images.chunks(OCR_GROUP) {
            // Each group renews the lease and stops a replaced run (reprocessed or deleted):
            // hundreds of pictures outlast a lease, and each one read is a paid call.
            set_stage(state, doc, "embedding", 90).await?;
            ocr.extend(crate::rag::vision::read_images(state, doc.payer(), group).await);
        }
        ocr
    } else {
        vec![None; parsed.images.len()]
    };
    let ocr_ms = ms(t);

    let mut timings = json!({ "parseMs": parse_ms, "chunkMs": chunk_ms, "embedMs": embed_ms, "imageOcrMs": ocr_ms });
    if let Some(reason) = smart_fallback {
        timings["smartChunkingFallback"] = json!(reason);
    }
    Ok(Prepared {
        parsed,
        chunks,
        vectors,
        ocr,
        timings,
        started,
    })
}

async fn parse_document(state: &AppState, doc: &DocRow, kb: &KbRow) -> Result<ParsedDocument, Stop> {
    let settings = &kb.parse_params.0;
    let bytes = crate::storage::read_all(state.storage(), &doc.storage_key, None)
        .await
        .map_err(|e| match e {
            // Gone from the store, it will not come back with another delivery.
            StorageError::NotFound => permanent("parsing", "the document's file is missing from storage"),
            // What the store answered (roles, keys, bucket names) is for the log.
            e => {
                tracing::warn!(document_id = doc.id, error = %e, "reading the document's file failed");
                Stop::Transient {
                    stage: "parsing",
                    error: anyhow::anyhow!("the document's file could not be read from storage"),
                }
            }
        })?;
    let options = ParseOptions {
        // Images are needed to read them, even when they are not shown as evidence.
        save_images: settings.save_images || kb.chunk_params.0.image_ocr,
        max_image_count: settings.max_image_count.max(0) as usize,
        max_image_bytes: settings.max_image_bytes.max(0) as usize,
    };
    if settings.engine == "extparse" {
        return crate::rag::extparse::convert(state, settings, &doc.name, bytes.to_vec(), &options)
            .await
            .map_err(|e| match e {
                ExtparseError::Retry(m) => Stop::Transient {
                    stage: "parsing",
                    error: anyhow::anyhow!(m),
                },
                ExtparseError::Fail(m) => permanent("parsing", m),
            });
    }
    let name = doc.name.clone();
    // Dropped with this future (out of time, the lease taken over), it ends the parse too.
    let (_abandon, abandoned) = parse::Abandon::new();
    // Parsing is CPU work: keep it off the async workers that serve requests.
    tokio::task::spawn_blocking(move || parse::parse_abandonable(&name, &bytes, &options, abandoned))
        .await
        .map_err(|e| match e.is_panic() {
            // The same bytes fail the same way: retried, a parser's panic cost two more
            // deliveries and ended as "task ... panicked". The panic itself is in the log.
            true => permanent(
                "parsing",
                "the file could not be read: the parser failed on it (is it damaged?)",
            ),
            false => Stop::Transient {
                stage: "parsing",
                error: e.into(),
            },
        })?
        .map_err(|e| permanent("parsing", e.to_string()))
}

async fn embed(state: &AppState, doc: &DocRow, kb: &KbRow, chunks: &[Chunk]) -> Result<Vec<Vec<f32>>, Stop> {
    let model = gateway::load(state, kb.embedding_model_id, ModelType::Embedding)
        .await
        .map_err(|e| match e.may_pass() {
            true => Stop::Transient {
                stage: "embedding",
                error: e.into(),
            },
            false => permanent("embedding", format!("the embedding model cannot be used: {}", e.told())),
        })?;
    let dim = kb.dimension as usize;
    let mut vectors = Vec::with_capacity(chunks.len());
    for (i, group) in chunks.chunks(EMBED_GROUP).enumerate() {
        let texts: Vec<String> = group.iter().map(|c| c.content.clone()).collect();
        let out = gateway::embed(
            state,
            &model,
            Billing::User(doc.payer()),
            &texts,
            InputKind::Document,
            // Checked here rather than by the client: a base given a dimension its model does
            // not make is a permanent failure that names both, not a passing one retried at
            // its uploader's cost.
            None,
        )
        .await
        .map_err(|e| match e {
            // The document's message says what failed; what the endpoint answered stays in the
            // log (the base's owner may not own the model: see ModelError::brief).
            CallError::Model(m) => {
                tracing::warn!(document_id = doc.id, error = %m, "embedding failed");
                // A rejected key, an unknown model or a refused request answer the same on
                // every delivery: retried, each paid the groups before it again.
                match m.may_pass() {
                    true => Stop::Transient {
                        stage: "embedding",
                        error: anyhow::anyhow!(m.brief()),
                    },
                    false => permanent("embedding", m.brief()),
                }
            }
            // The service's own failure (its database during the quota hold) passes, as the
            // model's does: failed for good, its document waited for a reprocess by hand.
            CallError::Refused(r) if r.may_pass() => Stop::Transient {
                stage: "embedding",
                error: r.into(),
            },
            CallError::Refused(r) => permanent("embedding", r.told()),
        })?;
        if let Some(made) = out.dimension().filter(|made| *made != dim) {
            return Err(permanent(
                "embedding",
                format!(
                    "the embedding model makes {made}-dimensional vectors, but the knowledge base's \
                     dimensionOfVectorModel is {dim}; set the model's dimension on an empty base"
                ),
            ));
        }
        vectors.extend(out.vectors);
        let done = ((i + 1) * EMBED_GROUP).min(chunks.len());
        let progress = 40 + (50 * done / chunks.len()) as i32;
        set_stage(state, doc, "embedding", progress).await?;
    }
    Ok(vectors)
}

/// The final write, of what `prepare` made and the pictures stored under `image_keys`.
async fn index(
    state: &AppState,
    doc: &DocRow,
    kb: &KbRow,
    prepared: Prepared,
    image_keys: Vec<String>,
) -> Result<(), Stop> {
    let t = Instant::now();
    let Prepared {
        parsed,
        chunks,
        vectors,
        ocr,
        mut timings,
        started,
    } = prepared;
    let transient = |e: anyhow::Error| Stop::Transient {
        stage: "indexing",
        error: e,
    };
    let indexes = match crate::rag::backends::Indexes::of(state, kb).await {
        Ok(indexes) => indexes,
        Err(e) => {
            unnamed(state, &image_keys, true).await;
            return Err(match e.may_pass() {
                true => transient(e.into()),
                false => permanent("indexing", e.told()),
            });
        }
    };
    // The new chunks' entries, undone in an engine of its own (Milvus, OpenSearch) when the
    // transaction does not commit: the rollback leaves them there, where they would take
    // places among every search's best hits under ids no row has.
    let mut new_ids: Vec<i64> = Vec::new();
    // Set just before the commit: only the commit's own failure may have come after it
    // committed (a lost answer), any earlier one certainly rolled back.
    let mut committing = false;
    // The replaced images, or None when another run superseded this one.
    let result: anyhow::Result<Option<Vec<String>>> = async {
        let mut tx = state.db().begin().await?;
        let current: Option<Uuid> = sqlx::query_scalar("SELECT run_id FROM documents WHERE id = $1 FOR UPDATE")
            .bind(doc.id)
            .fetch_optional(&mut *tx)
            .await?;
        if current != Some(doc.run_id) {
            return Ok(None); // superseded while we worked: our images are waste
        }
        let replaced = super::write_chunks(&mut tx, &indexes, kb.id, doc.id, &chunks, &vectors, &mut new_ids).await?;
        let old_images: Vec<String> = sqlx::query_scalar("DELETE FROM document_images WHERE document_id = $1 RETURNING storage_key")
            .bind(doc.id)
            .fetch_all(&mut *tx)
            .await?;
        for ((image, key), ocr) in parsed.images.iter().zip(&image_keys).zip(&ocr) {
            sqlx::query(&format!(
                "{} INSERT INTO document_images (rag_id, document_id, image_index, storage_key, mime_type, caption,
                 section_title, source_page, ocr_text) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                leftovers::take_back(4)
            ))
            .bind(kb.id)
            .bind(doc.id)
            .bind(image.index as i32)
            .bind(key)
            .bind(&image.mime)
            .bind(&image.caption)
            .bind(&image.section_title)
            .bind(image.page.map(|p| p as i32))
            .bind(ocr)
            .execute(&mut *tx)
            .await?;
        }
        timings["indexMs"] = json!(ms(t));
        timings["totalMs"] = json!(ms(started));
        sqlx::query(
            "UPDATE documents SET status = 'success', progress = 100, chunk_count = $2, timings = $3, lease_until = NULL,
             error_stage = NULL, error_message = NULL, updated_at = now() WHERE id = $1",
        )
        .bind(doc.id)
        .bind(chunks.len() as i32)
        .bind(&timings)
        .execute(&mut *tx)
        .await?;
        leftovers::going(&mut tx, &old_images).await?;
        // Last before the commit, once every statement that could refuse it has run.
        indexes.remove(&mut tx, &replaced).await?;
        committing = true;
        tx.commit().await?;
        Ok(Some(old_images))
    }
    .await;
    match result {
        Ok(Some(replaced)) => {
            leftovers::delete(state, &replaced).await;
            Ok(())
        }
        Ok(None) => {
            unnamed(state, &image_keys, true).await;
            Ok(())
        }
        // This attempt's images belong to no row: the attempt that indexes the document
        // stores its own. Unless the commit's answer was lost: the housekeeping sees then.
        Err(e) => {
            let certain = !committing || e.downcast_ref::<sqlx::Error>().is_none_or(leftovers::certain);
            if certain {
                undo_entries(state, &indexes, &new_ids).await;
            }
            unnamed(state, &image_keys, certain).await;
            Err(transient(e))
        }
    }
}

/// Removes the index entries of chunks whose transaction rolled back, on a connection of its
/// own (the transaction's is gone with it).
async fn undo_entries(state: &AppState, indexes: &crate::rag::backends::Indexes, chunk_ids: &[i64]) {
    if chunk_ids.is_empty() {
        return;
    }
    match state.db().acquire().await {
        Ok(mut conn) => indexes.undo(&mut conn, chunk_ids).await,
        Err(e) => tracing::warn!(
            error = %e,
            rag_id = indexes.rag_id,
            chunks = chunk_ids.len(),
            "could not undo the index entries of a rolled-back write"
        ),
    }
}

/// An attempt's images no row names (see `leftovers::unnamed`).
async fn unnamed(state: &AppState, keys: &[String], certain: bool) {
    for key in keys {
        leftovers::unnamed(state, key, certain).await;
    }
}

/// Stores the extracted images under keys of this attempt alone, so a repeated or superseded
/// attempt never overwrites, or later deletes, what another attempt indexed. Each is noted
/// ahead of its row (see `leftovers`): a worker killed before its commit leaves files the
/// housekeeping deletes.
async fn store_images(state: &AppState, doc: &DocRow, parsed: &ParsedDocument) -> anyhow::Result<Vec<String>> {
    let attempt = Uuid::new_v4().simple();
    let mut keys = Vec::with_capacity(parsed.images.len());
    for image in &parsed.images {
        let ext = image.mime.rsplit('/').next().unwrap_or("bin");
        let key = format!("rag/{}/images/{}/{attempt}-{}.{ext}", doc.rag_id, doc.id, image.index);
        let stored = leftovers::put_ahead(state, &key, bytes::Bytes::from(image.bytes.clone()), &image.mime).await;
        if let Err(e) = stored {
            unnamed(state, &keys, true).await;
            return Err(anyhow::anyhow!("storing image {}: {e}", image.index));
        }
        keys.push(key);
    }
    Ok(keys)
}
