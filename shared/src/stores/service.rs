//! Business rules of store instances. Reading is open to every signed-in user; changes are
//! for administrators.

use serde_json::Value;
use sqlx::PgConnection;

use super::repo::{self, Fields, Filter};
use super::*;
use crate::crypto::is_masked;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::error::is_foreign_key_violation;
use crate::{validate, AppError, AppResult, AppState};

fn category(value: i64) -> AppResult<i16> {
    match value {
        1 => Ok(VECTOR_STORE),
        2 => Ok(SEARCH_ENGINE),
        _ => Err(AppError::validation(
            "category must be 1 (vector store) or 2 (search engine)",
        )),
    }
}

fn status(value: i64) -> AppResult<i16> {
    match value {
        0 | 1 => Ok(value as i16),
        _ => Err(AppError::validation("status must be 0 (inactive) or 1 (active)")),
    }
}

fn parse_status_name(value: &str) -> AppResult<i16> {
    match value.trim().to_ascii_uppercase().as_str() {
        "ACTIVE" | "1" => Ok(1),
        "INACTIVE" | "0" => Ok(0),
        _ => Err(AppError::validation("status must be ACTIVE or INACTIVE")),
    }
}

/// Splits the password out of a config (it is stored sealed, apart) and checks the rest.
fn split_config(state: &AppState, t: StoreType, config: &Value) -> AppResult<(Value, Option<String>)> {
    Connection::from_config(config, t.default_port())?;
    let mut clean = config.clone();
    let password = clean.as_object_mut().and_then(|o| o.remove("password"));
    let mut rest = clean.clone();
    rest.as_object_mut().map(|o| o.remove("caCert"));
    if rest.to_string().len() > MAX_CONFIG_BYTES {
        return Err(AppError::validation(format!(
            "config must be at most {} KiB besides caCert",
            MAX_CONFIG_BYTES / 1024
        )));
    }
    let sealed = match password
        .as_ref()
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        Some(p) if !is_masked(p) => Some(state.secrets().seal(p)?),
        _ => None,
    };
    Ok((clean, sealed))
}

pub async fn list(state: &AppState, user: &CurrentUser, category_code: Option<i64>) -> AppResult<Vec<StoreView>> {
    let f = Filter {
        category: category_code.map(category).transpose()?,
        ..Default::default()
    };
    let (rows, _) = repo::list(state.db(), &f, None).await?;
    Ok(rows
        .into_iter()
        .map(|r| StoreView::new(r, state.secrets(), user.is_admin()))
        .collect())
}

pub async fn page(
    state: &AppState,
    user: &CurrentUser,
    paging: PageQuery,
    f: StoreFilter,
) -> AppResult<Page<StoreView>> {
    let keyword = validate::optional(f.keyword);
    let store_type = match validate::optional(f.store_type) {
        Some(t) => Some(
            StoreType::from_name(&t)
                .ok_or_else(|| AppError::validation("type must be PGVECTOR, MILVUS, OPENSEARCH or PG_FULLTEXT"))?
                .code(),
        ),
        None => None,
    };
    let filter = Filter {
        category: f.category.map(category).transpose()?,
        keyword: keyword.as_deref(),
        store_type,
        status: validate::optional(f.status)
            .map(|s| parse_status_name(&s))
            .transpose()?,
    };
    let (rows, total) = repo::list(state.db(), &filter, Some((paging.size(), paging.offset()))).await?;
    Ok(Page::new(
        rows.into_iter()
            .map(|r| StoreView::new(r, state.secrets(), user.is_admin()))
            .collect(),
        paging,
        total,
    ))
}

pub async fn get(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<StoreView> {
    let row = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("store instance"))?;
    Ok(StoreView::new(row, state.secrets(), user.is_admin()))
}

fn store_type(code: i64, category: i16) -> AppResult<StoreType> {
    let t = StoreType::from_code(code).ok_or_else(|| {
        AppError::validation("type must be 1 (PGVECTOR), 2 (MILVUS), 3 (OPENSEARCH) or 4 (PG_FULLTEXT)")
    })?;
    if !t.serves(category) {
        return Err(AppError::validation(format!(
            "type {} cannot serve as {}",
            t.name(),
            category_name(category)
        )));
    }
    Ok(t)
}

pub async fn create(state: &AppState, user: &CurrentUser, req: StoreRequest) -> AppResult<i64> {
    user.require_admin()?;
    let name = validate::required("name", req.name)?;
    validate::length("name", &name, 1, 100)?;
    let category = category(validate::present("category", req.category)?)?;
    let t = store_type(validate::present("type", req.store_type)?, category)?;
    let (config, sealed) = split_config(state, t, &validate::present("config", req.config)?)?;
    let status = req.status.map(status).transpose()?;
    check_default_active(false, status.unwrap_or(1), req.is_default == Some(true))?;
    let fields = Fields {
        name: Some(&name),
        category: Some(category),
        store_type: Some(t.code()),
        config: Some(&config),
        password_enc: sealed.as_deref(),
        status,
    };
    let mut tx = state.db().begin().await?;
    if req.is_default == Some(true) {
        repo::lock_default_switches(&mut tx).await?;
    }
    let id = repo::insert(&mut *tx, &fields).await?;
    if req.is_default == Some(true) {
        repo::make_default(&mut tx, id, category).await?;
    }
    tx.commit().await?;
    Ok(id)
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: StoreRequest) -> AppResult<()> {
    user.require_admin()?;
    // The row is read under its lock (and a default switch's): a copy read before, checked
    // and written back, could move the default out of its category, or write back a category
    // and type another edit changed, past the check that no base uses the instance. A base
    // being given this instance meanwhile holds it, and is counted once it committed (see
    // `repo::hold`).
    let mut tx = state.db().begin().await?;
    if req.is_default == Some(true) {
        repo::lock_default_switches(&mut tx).await?;
    }
    repo::lock_for_edit(&mut tx, id).await?;
    let row = repo::find(&mut *tx, id)
        .await?
        .ok_or_else(|| AppError::not_found("store instance"))?;
    if row.builtin && (req.config.is_some() || req.store_type.is_some() || req.category.is_some()) {
        return Err(AppError::business(
            "the service's own database instance keeps its type and connection",
        ));
    }
    let name = req.name.map(|n| validate::required("name", Some(n))).transpose()?;
    if let Some(name) = &name {
        validate::length("name", name, 1, 100)?;
    }
    let category = req.category.map(category).transpose()?.unwrap_or(row.category);
    let t = match req.store_type {
        Some(code) => store_type(code, category)?,
        None => store_type(i64::from(row.store_type), category)?,
    };
    check_kind_change(&mut tx, &row, category, t).await?;
    let split = req.config.as_ref().map(|c| split_config(state, t, c)).transpose()?;
    let (config, sealed) = match &split {
        Some((c, s)) => (Some(c), s.as_deref()),
        None => (None, None),
    };
    if row.password_enc.is_some() && sealed.is_none() {
        check_password_stays(&row, config.unwrap_or(&row.config), t)?;
    }
    let new_status = req.status.map(status).transpose()?;
    check_default_active(
        row.is_default,
        new_status.unwrap_or(row.status),
        req.is_default == Some(true),
    )?;
    let fields = Fields {
        name: name.as_deref(),
        category: Some(category),
        store_type: Some(t.code()),
        config,
        password_enc: sealed,
        status: new_status,
    };
    repo::update(&mut *tx, id, &fields).await?;
    if req.is_default == Some(true) {
        repo::make_default(&mut tx, id, category).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A stored password goes where it was set up, as a model config's key does: an edit that
/// sends the instance to another host, port or type sends the password again (a masked one
/// sent back is not enough), or whoever made the edit could read it at an address of theirs.
fn check_password_stays(row: &StoreRow, config: &Value, t: StoreType) -> AppResult<()> {
    let before = Connection::from_config(&row.config, row.store_type().default_port())?;
    let after = Connection::from_config(config, t.default_port())?;
    if (before.host, before.port) != (after.host, after.port) || t.code() != row.store_type {
        return Err(AppError::validation(
            "config.password: send the password again to change host, port or type; the stored one goes only where it was set up",
        ));
    }
    Ok(())
}

/// Every base made without naming a store gets its category's default: it stays active, and
/// an inactive instance does not become it (another instance becomes the default first).
fn check_default_active(is_default: bool, status: i16, making_default: bool) -> AppResult<()> {
    if status == 0 && (is_default || making_default) {
        return Err(AppError::validation(
            "status: the default instance of its category stays active; make another instance the default first",
        ));
    }
    Ok(())
}

/// An instance's category and type say what its knowledge bases keep in it and how it is
/// reached: they change only while no base uses it. A default keeps its category (its
/// category would be left without a default): another instance becomes the default first.
/// The connection (`config`) may change in use, as it does when a cluster moves.
/// Counted on the edit's transaction, which holds the row's lock.
async fn check_kind_change(conn: &mut PgConnection, row: &StoreRow, category: i16, t: StoreType) -> AppResult<()> {
    let (category_changes, type_changes) = (category != row.category, t.code() != row.store_type);
    if row.is_default && category_changes {
        return Err(AppError::validation(
            "category: the default instance of its category keeps it; make another instance the default first",
        ));
    }
    if category_changes || type_changes {
        let users = repo::users_count(conn, row.id).await?;
        if users > 0 {
            let field = if category_changes { "category" } else { "type" };
            return Err(AppError::validation(format!(
                "{field}: {users} knowledge bases use this store instance; it keeps its category and type while they do"
            )));
        }
    }
    Ok(())
}

pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    user.require_admin()?;
    let row = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("store instance"))?;
    if row.builtin {
        return Err(AppError::business(
            "the service's own database instance cannot be deleted",
        ));
    }
    if row.is_default {
        return Err(AppError::business(
            "the default instance of its category cannot be deleted; make another instance the default first",
        ));
    }
    let users = repo::users_count(state.db(), id).await?;
    if users > 0 {
        return Err(AppError::business(format!(
            "{users} knowledge bases use this store instance"
        )));
    }
    // A base created meanwhile holds the instance through its foreign key.
    repo::delete(state.db(), id).await.map_err(|e| {
        let in_use = [
            "knowledge_bases_vector_store_instance_id_fkey",
            "knowledge_bases_search_engine_instance_id_fkey",
        ]
        .iter()
        .any(|fk| is_foreign_key_violation(&e, fk));
        match in_use {
            true => AppError::business("a knowledge base was created on this store instance meanwhile"),
            false => e.into(),
        }
    })
}

/// Administrators only, like registering an instance: the probe connects to any host and
/// port it is given, which would let anyone map the service's network.
pub async fn test(state: &AppState, user: &CurrentUser, req: StoreTestRequest) -> AppResult<bool> {
    user.require_admin()?;
    let name = validate::required("type", req.store_type)?;
    let t = StoreType::from_name(&name)
        .ok_or_else(|| AppError::validation("type must be PGVECTOR, MILVUS, OPENSEARCH or PG_FULLTEXT"))?;
    let config = validate::present("config", req.config)?;
    let conn = Connection::from_config(&config, t.default_port())?;
    probe::test(state, t, &conn).await?;
    Ok(true)
}

/// The instance `field` names, when it is an active one of `category` (a base's vector store
/// or search engine); `None` takes the category's default.
pub async fn usable(state: &AppState, field: &str, id: Option<i64>, category: i16) -> AppResult<i64> {
    Ok(usable_row(state, field, id, category).await?.id)
}

/// [`usable`], for a memory config: memories are kept in the service's database, so only the
/// built-in instance of the category may be named. Another one was once taken and never used.
pub async fn usable_for_memories(state: &AppState, field: &str, id: i64, category: i16) -> AppResult<()> {
    let row = usable_row(state, field, Some(id), category).await?;
    if !row.builtin {
        return Err(AppError::validation(format!(
            "{field}: memories are kept in the service's own database; store instance {id} is another store (name the built-in {} or none)",
            category_name(category)
        )));
    }
    Ok(())
}

async fn usable_row(state: &AppState, field: &str, id: Option<i64>, category: i16) -> AppResult<StoreRow> {
    let row = match id {
        Some(id) => repo::find(state.db(), id)
            .await?
            .ok_or_else(|| AppError::validation(format!("{field}: store instance {id} does not exist")))?,
        None => repo::default_of(state.db(), category)
            .await?
            .ok_or_else(|| AppError::validation(format!("{field} is required: no default store instance exists")))?,
    };
    if row.category != category || row.status != 1 {
        return Err(AppError::validation(format!(
            "{field}: store instance {} is not an active {}",
            row.id,
            category_name(category)
        )));
    }
    Ok(row)
}

/// Holds the base's store instances in the transaction that writes the base (see
/// `repo::hold`); one changed to another kind, or deactivated, since it was checked is refused.
pub async fn hold_for_base(conn: &mut PgConnection, vector_store: i64, search_engine: Option<i64>) -> AppResult<()> {
    for (field, id, category) in [
        ("vectorStoreInstanceId", Some(vector_store), VECTOR_STORE),
        ("searchEngineInstanceId", search_engine, SEARCH_ENGINE),
    ] {
        if let Some(id) = id {
            if !repo::hold(conn, id, category).await? {
                return Err(AppError::validation(format!(
                    "{field}: store instance {id} is not an active {} (it changed meanwhile)",
                    category_name(category)
                )));
            }
        }
    }
    Ok(())
}
