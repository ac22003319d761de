//! `/memory/config`: memory config CRUD and the recall debugger. Any signed-in user may read
//! configs and create one; only its creator or an administrator may change or delete it.

use super::config_model::{ConfigRequest, ConfigRow, ConfigView};
use super::config_repo;
use super::model::{DebugRequest, MemoryView};
use super::repo::{self, Scope};
use super::{recall, service};
use crate::creation_cap::{self, Created};
use crate::domain::CurrentUser;
use crate::domain::Owner;
use crate::models::gateway::Billing;
use crate::validate;
use crate::{AppError, AppResult, AppState};

pub async fn list(state: &AppState, user: &CurrentUser) -> AppResult<Vec<ConfigView>> {
    Ok(config_repo::list(state.db(), user.id)
        .await?
        .into_iter()
        .map(ConfigView::from)
        .collect())
}

async fn find(state: &AppState, id: i64) -> AppResult<ConfigRow> {
    config_repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("memory config"))
}

pub async fn detail(state: &AppState, id: i64) -> AppResult<ConfigView> {
    find(state, id).await.map(ConfigView::from)
}

pub async fn create(state: &AppState, user: &CurrentUser, req: ConfigRequest) -> AppResult<i64> {
    validate::required("name", req.name.clone())?;
    validate::present("embeddingModelId", req.embedding_model_id)?;
    // Before validation, whose embedding probe is a model call: counted again below, where it
    // cannot race.
    creation_cap::check_early(state, user, Created::MemoryConfig).await?;
    let mut row = ConfigRow::builtin();
    row.apply(req);
    row.creator_id = user.id;
    row.validate(state, user, None).await?;
    let mut tx = state.db().begin().await?;
    creation_cap::check(&mut tx, state.config(), user, Created::MemoryConfig).await?;
    row.hold_new_models(&mut tx, user, None).await?;
    let id = config_repo::save(&mut *tx, &row)
        .await?
        .ok_or_else(|| AppError::Internal(anyhow::anyhow!("an insert returned no id")))?;
    tx.commit().await?;
    Ok(id)
}

async fn managed(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<ConfigRow> {
    let row = find(state, id).await?;
    if !user.can_manage(row.creator_id) {
        return Err(AppError::Forbidden(
            "only the creator of a memory config or an administrator may change it".into(),
        ));
    }
    Ok(row)
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: ConfigRequest) -> AppResult<()> {
    let before = managed(state, user, id).await?;
    let mut row = before.clone();
    row.apply(req);
    // Checked, and a new embedding model asked for its dimension, before the config is taken:
    // a slow model must not hold up agents being bound to the config meanwhile.
    row.validate(state, user, Some(&before)).await?;
    // The binders are checked under the config's lock: an agent being bound to it meanwhile
    // is either seen here or checks this edit's models itself (`config_repo::find_held`). An edit
    // saved since `before` was read makes the save below find no row: 409.
    let mut tx = state.db().begin().await?;
    config_repo::lock_for_edit(&mut tx, id).await?;
    // As a knowledge base keeps its model while it holds documents: recall searches with the
    // config's model only, and the bound agents' memories would all drop out of it, unsaid.
    let re_embedding = row.embedding_model_id != before.embedding_model_id || row.dimension != before.dimension;
    if let (true, Some(old)) = (re_embedding, before.embedding_model_id) {
        let kept = config_repo::memories_embedded_by(&mut *tx, id, old).await?;
        if kept > 0 {
            return Err(AppError::business(format!(
                "embeddingModelId: the agents bound to memory config {id} hold {kept} memories embedded by model {old}; \
                 they could no longer be recalled with another model or dimension"
            )));
        }
    }
    row.hold_new_models(&mut tx, user, Some(&before)).await?;
    match config_repo::save(&mut *tx, &row).await? {
        Some(_) => Ok(tx.commit().await?),
        None => Err(AppError::changed_meanwhile("memory config")),
    }
}

/// Refused while agents are bound to the config: they would silently lose their strategy.
pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    managed(state, user, id).await?;
    let n = config_repo::agents_using(state.db(), id).await?;
    if n > 0 {
        return Err(AppError::business(format!(
            "memory config {id} is used by {n} agent(s); unbind it first"
        )));
    }
    // An agent bound meanwhile holds the config through its foreign key.
    config_repo::delete(state.db(), id).await.map_err(|e| match e {
        sqlx::Error::Database(db) if db.constraint() == Some("agents_memory_config_id_fkey") => AppError::business(
            format!("memory config {id} was just bound to an agent; unbind it first"),
        ),
        other => other.into(),
    })?;
    Ok(())
}

/// Recalls with config `id` for one user and agent, as chat would, without counting the
/// access. Users may debug their own memories; administrators anyone's.
pub async fn debug(state: &AppState, user: &CurrentUser, id: i64, req: DebugRequest) -> AppResult<Vec<MemoryView>> {
    let agent_id = validate::present("agentId", req.agent_id)?;
    let user_id = validate::present("userId", req.user_id)?;
    let query = validate::required("query", req.query)?;
    validate::length("query", &query, 1, 2000)?;
    if !user.is_admin() && user_id != user.id {
        return Err(AppError::Forbidden(
            "userId: you may only debug recall of your own memories".into(),
        ));
    }
    // Recall runs with the config as checked: a read after the check could see models an
    // edit put in meanwhile that the caller may not use.
    let config = find(state, id).await?;
    let models = config.model_refs("id");
    crate::models::service::hold_usable(&mut *state.db().acquire().await?, user, &models).await?;
    service::visible_agent(state, user, agent_id).await?;
    let owner = Owner::User(user_id);
    let strategy = recall::strategy_of(state, config).await?;
    let hits = recall::run(
        state,
        &Scope::recall(agent_id, owner, strategy.config.memory_expiration_days),
        &strategy,
        Billing::of(user),
        &query,
        false,
    )
    .await?;
    let ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
    let scores: std::collections::HashMap<i64, f64> = hits.iter().map(|h| (h.id, h.score)).collect();
    Ok(repo::load(state.db(), &ids)
        .await?
        .into_iter()
        .map(|r| {
            let mut v = MemoryView::from(r);
            v.relevance_score = scores.get(&v.id).copied().unwrap_or(0.0);
            v
        })
        .collect())
}
