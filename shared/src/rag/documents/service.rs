//! Documents: listing, files, images, deletion, reprocessing and import by URL.

use super::dedup::{self, Conflict, Decision};
use super::repo::{self, NewDoc};
use super::*;
use crate::domain::{CurrentUser, Page, PageQuery, StoredFile};
use crate::rag::backends::{chunk_ids_of, remove_replaced, store_error, Indexes};
use crate::rag::bases;
use crate::rag::parse::FileType;
use crate::resources::leftovers;
use crate::{AppError, AppResult, AppState};

/// A document of a base the caller owns, or 404.
pub async fn owned(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<DocRow> {
    let doc = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("document"))?;
    bases::service::owned(state, user, doc.rag_id)
        .await
        .map_err(|_| AppError::not_found("document"))?;
    Ok(doc)
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    rag_id: Option<i64>,
    paging: PageQuery,
) -> AppResult<Page<DocView>> {
    if let Some(id) = rag_id {
        bases::service::owned(state, user, id).await?;
    }
    let owner = (!user.is_admin()).then_some(user.id);
    let (rows, total) = repo::page(state.db(), owner, rag_id, paging.size(), paging.offset()).await?;
    Ok(Page::new(rows.into_iter().map(DocView::from).collect(), paging, total))
}

pub async fn get(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<DocView> {
    owned(state, user, id).await.map(DocView::from)
}

/// The stored original of a document the caller owns.
pub async fn file(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<StoredFile> {
    let doc = owned(state, user, id).await?;
    Ok(StoredFile {
        key: doc.storage_key,
        name: doc.name,
        mime: doc.mime_type,
        size: doc.file_size as u64,
    })
}

pub async fn images(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<Vec<DocImageView>> {
    owned(state, user, id).await?;
    Ok(repo::images_of(state.db(), id)
        .await?
        .into_iter()
        .map(|row| {
            let url = state.link(&format!("/document/image/{}", row.id));
            row.into_view(url)
        })
        .collect())
}

/// One saved document image, if its base is the caller's.
pub async fn image(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<StoredFile> {
    let (key, mime, rag_id) = repo::image_key(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("image"))?;
    bases::service::owned(state, user, rag_id)
        .await
        .map_err(|_| AppError::not_found("image"))?;
    let size = state
        .storage()
        .head(&key)
        .await?
        .ok_or_else(|| AppError::not_found("image"))?;
    Ok(StoredFile {
        key,
        name: format!("image-{id}"),
        mime,
        size,
    })
}

/// Deletes the document, its chunks, index entries, images and files; index entries go before
/// the rows commit, so a store that is down refuses the delete instead of leaving its entries
/// behind for good (a failure part-way leaves the rows to a retry, which completes it: removing
/// what is already gone succeeds in every store). Files go after the commit, their keys noted
/// with it (`leftovers::going`): one not removed then is the housekeeping's.
pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    let doc = owned(state, user, id).await?;
    let kb = bases::service::owned(state, user, doc.rag_id).await?;
    let indexes = Indexes::of(state, &kb).await?;
    let mut tx = state.db().begin().await?;
    let keys = repo::object_keys(&mut tx, id).await?;
    indexes.remove_documents(&mut tx, &[id]).await.map_err(store_error)?;
    repo::delete(&mut *tx, id).await?;
    leftovers::going(&mut tx, &keys).await?;
    tx.commit().await?;
    // After the commit: deleted before it, a commit that failed left a document whose files
    // were gone.
    leftovers::delete(state, &keys).await;
    Ok(())
}

/// Sends the document through the pipeline again; a run in flight is superseded.
pub async fn reprocess(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<DocView> {
    owned(state, user, id).await?;
    // Paid for by whoever asks: the uploader may be an administrator, whose quota is unlimited.
    let run_id = repo::restart(state.db(), id, user.id)
        .await?
        .ok_or_else(|| AppError::not_found("document"))?;
    crate::rag::pipeline::enqueue(state, id, run_id, user.id).await;
    get(state, user, id).await
}

/// What the base's dedup rules say about a document of this name and content, as it is now.
async fn decide(db: impl sqlx::PgExecutor<'_>, kb: &bases::KbRow, name: &str, hash: &str) -> AppResult<dedup::Outcome> {
    let (by_name, by_content) = repo::conflicts(db, kb.id, name, hash).await?;
    let to_conflict = |c: Option<(i64, String)>| c.map(|(id, name)| Conflict { id: Some(id), name });
    Ok(dedup::decide(
        kb.dedup_strategy,
        kb.dedup_action,
        to_conflict(by_name),
        to_conflict(by_content),
    ))
}

/// Inserts the imported document, in place of `overwritten` (its rows and its entries in the
/// base's stores) when given; returns the new ids and the old document's object keys, whose
/// files are removed once this has committed.
async fn replace(
    state: &AppState,
    kb: &bases::KbRow,
    overwritten: Option<i64>,
    new: &NewDoc<'_>,
) -> AppResult<(i64, uuid::Uuid, Vec<String>)> {
    let mut tx = state.db().begin().await?;
    // Decided again under the base's lock: a document added since the first decision (another
    // import or upload of the same file) must not be passed over.
    repo::lock_additions(&mut tx, kb.id).await?;
    let now = decide(&mut *tx, kb, new.name, new.content_hash).await?;
    if now.conflict.and_then(|c| c.id) != overwritten {
        return Err(AppError::Conflict(
            "a document with the same name or content was added to the base meanwhile; import again".into(),
        ));
    }
    let mut old_keys = Vec::new();
    let mut old_chunks = Vec::new();
    if let Some(old) = overwritten {
        old_keys = repo::object_keys(&mut tx, old).await?;
        old_chunks = chunk_ids_of(&mut tx, &[old]).await?;
        repo::delete(&mut *tx, old).await?;
    }
    let (id, run_id) = repo::insert(&mut *tx, new).await?;
    leftovers::going(&mut tx, &old_keys).await?;
    // Last before the commit (see `remove_replaced`).
    remove_replaced(state, kb, &mut tx, &old_chunks).await?;
    // A commit whose answer was lost may have stored the document: told as the database being
    // unavailable, which the caller takes as "maybe stored" and leaves the file to housekeeping.
    if let Err(e) = tx.commit().await {
        return Err(match leftovers::certain(&e) {
            true => e.into(),
            false => AppError::unavailable("the database", anyhow::Error::new(e)),
        });
    }
    Ok((id, run_id, old_keys))
}

/// Fetches a URL into the base, applying its dedup rules.
/// An imported document's name and type. The type is the URL's file's; a `name` sent is the
/// document's title, given the URL's extension when it has none ("Employee handbook" of a
/// `.pdf` becomes "Employee handbook.pdf": the parser goes by the name), refused when it names
/// another type, and deciding it when the URL's file has none or only one `guessed` from its
/// content type. A name from the URL is the
/// sender's text as much as one in the request: a decoded path segment may hold control
/// characters (a NUL cannot be stored) or be of any length.
fn import_name(sent: Option<String>, from_url: &str, guessed: bool) -> AppResult<(String, FileType)> {
    use crate::resources::service::clean_file_name;
    let url_name = clean_file_name(from_url);
    let url_type = FileType::from_name(&url_name).filter(|_| !guessed);
    let guessed_type = FileType::from_name(&url_name).filter(|_| guessed);
    let (field, name) = match crate::validate::optional(sent).map(|n| clean_file_name(&n)) {
        None => ("url", url_name),
        Some(given) if guessed_type.is_some() && FileType::from_name(&given).is_none() => {
            let guessed_type = guessed_type.map_or("txt", FileType::as_str);
            ("name", format!("{given}.{guessed_type}"))
        }
        Some(given) => match (FileType::from_name(&given), url_type) {
            (Some(named), Some(fetched)) if named != fetched => {
                return Err(AppError::validation(format!(
                    "name: {given} names a .{} file, but the url's file is .{}",
                    named.as_str(),
                    fetched.as_str()
                )))
            }
            (None, Some(fetched)) => ("name", format!("{given}.{}", fetched.as_str())),
            _ => ("name", given),
        },
    };
    let file_type = FileType::from_name(&name).ok_or_else(|| {
        AppError::validation(format!(
            "{field}: {name} is not a supported document type (pdf, docx, xlsx, csv, md, txt, html)"
        ))
    })?;
    Ok((name, file_type))
}

pub async fn import_url(state: &AppState, user: &CurrentUser, req: ImportUrlRequest) -> AppResult<Imported> {
    let rag_id = crate::validate::present("ragId", req.rag_id)?;
    let url = crate::validate::required("url", req.url)?;
    crate::validate::length("url", &url, 1, crate::validate::MAX_URL)?;
    let kb = bases::service::owned(state, user, rag_id).await?;
    let fetched = crate::rag::fetch::fetch(state, &url).await?;
    let (name, file_type) = import_name(req.name, &fetched.name, fetched.guessed)?;
    let hash = crate::crypto::content_hash(&fetched.bytes);
    let outcome = decide(state.db(), &kb, &name, &hash).await?;
    let imported = |document| Imported {
        document,
        decision: outcome.decision,
        match_type: outcome.match_type,
    };
    match outcome.decision {
        Decision::Reject => return Err(AppError::business(outcome.reject_reason.unwrap_or_default())),
        Decision::Skip => {
            let existing = outcome
                .conflict
                .as_ref()
                .and_then(|c| c.id)
                .ok_or_else(|| AppError::not_found("document"))?;
            return get(state, user, existing).await.map(imported);
        }
        _ => {}
    }
    let key = format!("rag/{rag_id}/uploads/{}", uuid::Uuid::new_v4().simple());
    let mime = crate::resources::service::sniff_mime(&fetched.bytes, &name);
    let size = fetched.bytes.len() as i64;
    leftovers::put_ahead(state, &key, fetched.bytes, &mime).await?;
    let overwritten = match outcome.decision {
        Decision::Overwrite => outcome.conflict.and_then(|c| c.id),
        _ => None,
    };
    let new = NewDoc {
        rag_id,
        name: &name,
        file_type: file_type.as_str(),
        source_type: "url",
        source_path: &url,
        storage_key: &key,
        mime_type: &mime,
        file_size: size,
        content_hash: &hash,
        creator_id: user.id,
    };
    // The new object is removed again whatever fails after it was stored, unless the failure
    // may have come after the commit (told as the database unavailable): housekeeping has it
    // then, and keeps it if the document was stored.
    let (id, run_id, old_keys) = match replace(state, &kb, overwritten, &new).await {
        Ok(done) => done,
        Err(e) => {
            let certain = !matches!(e, AppError::Unavailable { .. });
            leftovers::unnamed(state, &key, certain).await;
            return Err(e);
        }
    };
    // Queued first, as a commit's uploads are (`upload::commit`).
    crate::rag::pipeline::enqueue(state, id, run_id, user.id).await;
    leftovers::delete(state, &old_keys).await;
    get(state, user, id).await.map(imported)
}

#[cfg(test)]
mod tests {
    use super::import_name;

    fn named(sent: Option<&str>, from_url: &str, guessed: bool) -> Result<String, String> {
        import_name(sent.map(str::to_owned), from_url, guessed)
            .map(|(name, _)| name)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_name_from_the_files_type_only_yields_to_a_sent_one() {
        // The file named its type: a sent title takes it, another type is refused.
        assert_eq!(named(Some("Handbook"), "h.pdf", false).unwrap(), "Handbook.pdf");
        assert!(named(Some("Handbook.docx"), "h.pdf", false)
            .unwrap_err()
            .contains("names a .docx file, but the url's file is .pdf"));
        // Guessed from the content type: a sent name with a type decides it.
        assert_eq!(
            named(Some("Policy.docx"), "files.example.com.txt", true).unwrap(),
            "Policy.docx"
        );
        assert_eq!(
            named(Some("Policy"), "files.example.com.html", true).unwrap(),
            "Policy.html"
        );
        assert_eq!(
            named(None, "files.example.com.html", true).unwrap(),
            "files.example.com.html"
        );
    }
}
