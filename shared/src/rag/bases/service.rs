//! Business rules of knowledge bases. A base belongs to its creator; administrators see all.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;

use super::repo::{self, KbFields};
use super::*;
use crate::creation_cap::{self, Created};
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::models::gateway::Billing;
use crate::models::service::ModelRef;
use crate::models::ModelType;
use crate::rag::backends::{store_error, Indexes, Side};
use crate::stores::{self, SEARCH_ENGINE, VECTOR_STORE};
use crate::{validate, AppError, AppResult, AppState};

/// A base the caller may use and change, or 404 (others' bases are not revealed).
pub async fn owned(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<KbRow> {
    let row = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("knowledge base"))?;
    if !user.can_manage(row.creator_id) {
        return Err(AppError::not_found("knowledge base"));
    }
    Ok(row)
}

pub async fn page(state: &AppState, user: &CurrentUser, paging: PageQuery) -> AppResult<Page<KbView>> {
    let owner = (!user.is_admin()).then_some(user.id);
    let (rows, total) = repo::page(state.db(), owner, paging.size(), paging.offset()).await?;
    Ok(Page::new(rows.into_iter().map(KbView::from).collect(), paging, total))
}

pub async fn get(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<KbView> {
    owned(state, user, id).await.map(KbView::from)
}

/// Applies a partial JSON section onto typed settings; errors name `section.field`.
fn merge<T: Serialize + DeserializeOwned>(current: &T, patch: &Value, section: &str) -> AppResult<T> {
    let patch = patch
        .as_object()
        .ok_or_else(|| AppError::validation(format!("{section} must be a JSON object")))?;
    let mut merged = serde_json::to_value(current).map_err(|e| AppError::Internal(e.into()))?;
    if let Some(obj) = merged.as_object_mut() {
        for (k, v) in patch {
            obj.insert(k.clone(), v.clone());
        }
    }
    crate::json::parse_json(merged.to_string().as_bytes()).map_err(|e| AppError::validation(format!("{section}.{e}")))
}

/// The settings after a create or update request's flat fields are applied.
struct Settings {
    chunk: ChunkSettings,
    parse: ParseSettings,
}

fn apply_flat(req: &KbRequest, mut s: Settings) -> AppResult<Settings> {
    let c = &mut s.chunk;
    if let Some(m) = &req.chunk_mode {
        c.mode = m.trim().to_ascii_lowercase();
    }
    if let Some(v) = req.max_chunk_tokens {
        c.max_chunk_tokens = v;
    }
    if let Some(v) = req.chunk_overlap {
        c.chunk_overlap = v;
    }
    c.fit_overlap(req.chunk_overlap.is_some());
    if req.custom_delimiter.is_some() {
        c.custom_delimiter = req.custom_delimiter.clone();
    }
    if req.chunk_regex.is_some() {
        c.chunk_regex = req.chunk_regex.clone();
    }
    if req.chunk_model_id.is_some() {
        c.chunk_model_id = req.chunk_model_id;
    }
    if let Some(v) = req.merge_short_segments {
        c.merge_short_segments = v;
    }
    if let Some(v) = req.image_ocr {
        c.image_ocr = v;
    }
    if let Some(p) = &req.parse_params {
        s.parse = merge(&s.parse, p, "parseParams")?;
        s.parse.normalize();
    }
    let p = &mut s.parse;
    if let Some(e) = &req.parse_engine {
        p.engine = e.trim().to_ascii_lowercase();
    }
    if let Some(v) = req.extparse_do_ocr {
        p.do_ocr = v;
    }
    if let Some(v) = req.extparse_do_table_structure {
        p.do_table_structure = v;
    }
    if let Some(v) = req.extparse_save_images {
        p.save_images = v;
    }
    Ok(s)
}

fn dedup(field: &str, value: i64, max: i64) -> AppResult<i16> {
    validate::range(field, value, 0, max)?;
    Ok(value as i16)
}

/// The models a write of a base names: each must be one the caller may use (see
/// `models::service::usable_config`), and all are held by the transaction that writes the
/// base (`models::service::hold_usable`), so that a retype meanwhile sees the base among its
/// users.
struct NamedModels<'a> {
    state: &'a AppState,
    user: &'a CurrentUser,
    refs: Vec<ModelRef<'static>>,
    /// Those of `refs` that run in the chats of agents bound to the base: the embedding model
    /// (each question's vector) and the reranker.
    in_chats: Vec<ModelRef<'static>>,
}

impl<'a> NamedModels<'a> {
    fn new(state: &'a AppState, user: &'a CurrentUser) -> Self {
        Self {
            state,
            user,
            refs: Vec::new(),
            in_chats: Vec::new(),
        }
    }

    async fn check(&mut self, field: &'static str, id: i64, t: ModelType) -> AppResult<()> {
        crate::models::service::usable_config(self.state, self.user, field, id, t).await?;
        self.refs.push(ModelRef { field, id, t });
        Ok(())
    }

    /// `check`, for a model that agents bound to the base run in their chats.
    async fn check_in_chats(&mut self, field: &'static str, id: i64, t: ModelType) -> AppResult<()> {
        self.check(field, id, t).await?;
        self.in_chats.push(ModelRef { field, id, t });
        Ok(())
    }

    /// Holds the models (against a retype) in the transaction that writes base `id` (None: a
    /// new one). A PERSONAL model that runs in chats must be the creator's of each agent
    /// bound to the base: otherwise the base's owner could send the questions of everyone who
    /// talks to someone else's agent to an endpoint of theirs.
    async fn hold(&self, conn: &mut PgConnection, id: Option<i64>) -> AppResult<()> {
        crate::models::service::hold_usable(conn, self.user, &self.refs).await?;
        let Some(id) = id else {
            return Ok(());
        };
        let binding = crate::agents::repo::Binding::KnowledgeBase(id);
        crate::agents::references::check_bound_agents_may_run(&mut *conn, binding, &self.in_chats, self.user).await
    }
}

pub async fn create(state: &AppState, user: &CurrentUser, req: KbRequest) -> AppResult<KbView> {
    let name = validate::required("name", req.name.clone())?;
    validate::length("name", &name, 1, 100)?;
    validate::at_most("description", req.description.as_deref(), validate::MAX_DESCRIPTION)?;
    validate::at_most("icon", req.icon.as_deref(), validate::MAX_URL)?;
    let model_id = validate::present("embeddingModelId", req.embedding_model_id)?;
    let mut models = NamedModels::new(state, user);
    models
        .check_in_chats("embeddingModelId", model_id, ModelType::Embedding)
        .await?;
    let settings = apply_flat(
        &req,
        Settings {
            chunk: ChunkSettings::default(),
            parse: ParseSettings::default(),
        },
    )?;
    settings.chunk.params()?;
    settings.parse.check()?;
    if let Some(id) = settings.chunk.chunk_model_id {
        models.check("chunkModelId", id, ModelType::Chat).await?;
    }
    if let Some(id) = req.rerank_model_id {
        models.check_in_chats("rerankModelId", id, ModelType::Reranker).await?;
    }
    let dedup_strategy = dedup("dedupStrategy", req.dedup_strategy.unwrap_or(2), 3)?;
    let dedup_action = dedup("dedupAction", req.dedup_action.unwrap_or(0), 2)?;
    let vector_store = stores::service::usable(
        state,
        "vectorStoreInstanceId",
        req.vector_store_instance_id,
        VECTOR_STORE,
    )
    .await?;
    let search_store = stores::service::usable(
        state,
        "searchEngineInstanceId",
        req.search_engine_instance_id,
        SEARCH_ENGINE,
    )
    .await?;
    let told = req
        .dimension_of_vector_model
        .map(validate::vector_dimension)
        .transpose()?;
    // The probe is a paid model call: a user the cap refuses is refused before it (and counted
    // again under the lock below, where it cannot race).
    creation_cap::check_early(state, user, Created::KnowledgeBase).await?;
    let dimension = match told {
        Some(d) => check_dimension(state, user, model_id, d).await?,
        None => probe_dimension(state, user, model_id).await?,
    };
    let (description, icon) = (validate::optional(req.description), validate::optional(req.icon));
    // Naming a reranker is asking for reranking: left off, it showed in every read and never
    // ran until the base's config turned it on as well.
    let search = SearchSettings {
        rerank_model_id: req.rerank_model_id,
        rerank_enabled: req.rerank_model_id.is_some(),
        ..SearchSettings::default()
    };
    let fields = KbFields {
        name: &name,
        description: description.as_deref(),
        icon: icon.as_deref(),
        embedding_model_id: model_id,
        dimension,
        vector_store_instance_id: vector_store,
        rerank_model_id: req.rerank_model_id,
        search_engine_enable: req.search_engine_enable.unwrap_or(true),
        search_engine_instance_id: Some(search_store),
        chunk: &settings.chunk,
        parse: &settings.parse,
        search: &search,
        model: &ModelSettings::default(),
        dedup_strategy,
        dedup_action,
        upload_confirm: req.upload_confirm.unwrap_or(false),
    };
    let mut tx = state.db().begin().await?;
    creation_cap::check(&mut tx, state.config(), user, Created::KnowledgeBase).await?;
    models.hold(&mut tx, None).await?;
    stores::service::hold_for_base(&mut tx, vector_store, Some(search_store)).await?;
    let id = repo::insert(&mut *tx, &fields, user.id).await?;
    tx.commit().await?;
    // Built after the row is committed, without blocking other tenants' writes; a base whose
    // index could not be built is removed again, so a failed create leaves nothing.
    if let Err(e) = build_index(state, id).await {
        if let Err(undo) = repo::delete(state.db(), id).await {
            tracing::error!(rag_id = id, error = %undo, "removing a knowledge base whose index failed");
        }
        return Err(e);
    }
    let row = repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("knowledge base"))?;
    Ok(row.into())
}

/// The embedding model's dimension, asked of the model at the user's charge (see
/// `probe::vector_dimension`).
async fn probe_dimension(state: &AppState, user: &CurrentUser, model_id: i64) -> AppResult<i32> {
    crate::models::probe::vector_dimension(state, Billing::of(user), model_id, "a knowledge base").await
}

/// `told`, once the embedding model answered with vectors of that length, at the user's charge
/// (see `probe::check_dimension`): a base of another length would pay for every document's
/// embeddings, then fail it.
async fn check_dimension(state: &AppState, user: &CurrentUser, model_id: i64, told: i32) -> AppResult<i32> {
    crate::models::probe::check_dimension(state, Billing::of(user), model_id, told.into()).await?;
    Ok(told)
}

pub async fn update(state: &AppState, user: &CurrentUser, id: i64, req: KbRequest) -> AppResult<()> {
    let row = owned(state, user, id).await?;
    let name = match req.name.clone() {
        Some(n) => validate::required("name", Some(n))?,
        None => row.name.clone(),
    };
    validate::length("name", &name, 1, 100)?;
    let settings = apply_flat(
        &req,
        Settings {
            chunk: row.chunk_params.0.clone(),
            parse: row.parse_params.0.clone(),
        },
    )?;
    settings.chunk.params()?;
    settings.parse.check()?;
    let model_id = req.embedding_model_id.unwrap_or(row.embedding_model_id);
    let new_model = model_id != row.embedding_model_id;
    let asked_dimension = req
        .dimension_of_vector_model
        .map(validate::vector_dimension)
        .transpose()?;
    if (new_model || asked_dimension.is_some_and(|d| d != row.dimension)) && row.document_count > 0 {
        return Err(AppError::business(
            "embeddingModelId and dimensionOfVectorModel cannot change while the knowledge base has documents",
        ));
    }
    let mut models = NamedModels::new(state, user);
    if new_model {
        models
            .check_in_chats("embeddingModelId", model_id, ModelType::Embedding)
            .await?;
    }
    if let Some(id) = settings
        .chunk
        .chunk_model_id
        .filter(|m| Some(*m) != row.chunk_params.0.chunk_model_id)
    {
        models.check("chunkModelId", id, ModelType::Chat).await?;
    }
    // Ids sent back unchanged (a client saving the base as it read it) are not checked again,
    // as the other ids are not: a reranker disabled or a store deactivated since kept every
    // edit of the base, its renaming too, from being saved.
    let rerank = req.rerank_model_id.or(row.rerank_model_id);
    if let Some(r) = req.rerank_model_id.filter(|r| Some(*r) != row.rerank_model_id) {
        models.check_in_chats("rerankModelId", r, ModelType::Reranker).await?;
    }
    let vector_store = match req.vector_store_instance_id {
        Some(v) if v != row.vector_store_instance_id => {
            stores::service::usable(state, "vectorStoreInstanceId", Some(v), VECTOR_STORE).await?
        }
        _ => row.vector_store_instance_id,
    };
    let search_store = match req.search_engine_instance_id {
        Some(v) if Some(v) != row.search_engine_instance_id => {
            Some(stores::service::usable(state, "searchEngineInstanceId", Some(v), SEARCH_ENGINE).await?)
        }
        _ => row.search_engine_instance_id,
    };
    // The entries live in the stores: switching would leave them behind, unsearchable.
    let stores_changed = vector_store != row.vector_store_instance_id || search_store != row.search_engine_instance_id;
    if stores_changed && row.document_count > 0 {
        return Err(AppError::business(
            "vectorStoreInstanceId and searchEngineInstanceId cannot change while the knowledge base has documents",
        ));
    }
    validate::at_most("description", req.description.as_deref(), validate::MAX_DESCRIPTION)?;
    validate::at_most("icon", req.icon.as_deref(), validate::MAX_URL)?;
    // Sent blank, a field is cleared (null), as on creation; left out, it is kept.
    let kept_or_sent = |sent: &Option<String>, kept: &Option<String>| match sent {
        Some(v) => validate::optional(Some(v.clone())),
        None => kept.clone(),
    };
    let description = kept_or_sent(&req.description, &row.description);
    let icon = kept_or_sent(&req.icon, &row.icon);
    let mut search = row.search_params.0.clone();
    if req.rerank_model_id.is_some() {
        // As on creation: a reranker named where there was none turns reranking on, with at
        // least as many candidates as results (more results asked while it was off were
        // valid then, and would have been cut to the candidates).
        if search.rerank_model_id.is_none() && !search.rerank_enabled {
            search.rerank_enabled = true;
            search.enter_rerank_count = search.enter_rerank_count.max(search.result_count);
        }
        search.rerank_model_id = req.rerank_model_id;
        search.check()?;
    }
    let dedup_strategy = dedup(
        "dedupStrategy",
        req.dedup_strategy.unwrap_or(i64::from(row.dedup_strategy)),
        3,
    )?;
    let dedup_action = dedup(
        "dedupAction",
        req.dedup_action.unwrap_or(i64::from(row.dedup_action)),
        2,
    )?;
    // Last of the checks, as on creation: the probe is a paid call, and a request refused for
    // another field must not have made it.
    let dimension = match asked_dimension {
        Some(d) if new_model || d != row.dimension => check_dimension(state, user, model_id, d).await?,
        Some(d) => d,
        // A new model brings its own length, asked as on creation: kept, the old length would
        // refuse every vector the new model makes.
        None if new_model => probe_dimension(state, user, model_id).await?,
        None => row.dimension,
    };
    let model_changed = new_model || dimension != row.dimension;
    let fields = KbFields {
        name: &name,
        description: description.as_deref(),
        icon: icon.as_deref(),
        embedding_model_id: model_id,
        dimension,
        vector_store_instance_id: vector_store,
        rerank_model_id: rerank,
        search_engine_enable: req.search_engine_enable.unwrap_or(row.search_engine_enable),
        search_engine_instance_id: search_store,
        chunk: &settings.chunk,
        parse: &settings.parse,
        search: &search,
        model: &row.model_params.0,
        dedup_strategy,
        dedup_action,
        upload_confirm: req.upload_confirm.unwrap_or(row.upload_confirm),
    };
    let mut tx = state.db().begin().await?;
    if model_changed || stores_changed {
        // Counted again under the lock commits and imports add documents under: one that added
        // a document since the read above would otherwise leave it to be indexed in a shape its
        // base no longer has.
        crate::rag::documents::repo::lock_additions(&mut tx, id).await?;
        let now = repo::find(&mut *tx, id)
            .await?
            .ok_or_else(|| AppError::not_found("knowledge base"))?;
        if now.document_count > 0 {
            return Err(AppError::business(
                "documents were added meanwhile: the embedding model, its dimension and the store instances cannot change while the knowledge base has documents",
            ));
        }
    }
    models.hold(&mut tx, Some(id)).await?;
    if stores_changed {
        stores::service::hold_for_base(&mut tx, vector_store, search_store).await?;
    }
    let Some(wrote) = repo::update(&mut *tx, id, row.update_dt, &fields).await? else {
        return Err(AppError::changed_meanwhile("knowledge base"));
    };
    let vector_moved = vector_store != row.vector_store_instance_id;
    if dimension != row.dimension || vector_moved {
        drop_entries(state, &mut tx, &row, Side::Vectors, vector_moved).await?;
    }
    if search_store != row.search_engine_instance_id {
        drop_entries(state, &mut tx, &row, Side::Text, true).await?;
    }
    tx.commit().await?;
    // A base without documents has no chunks: only its index's shape changes. The index is
    // built outside any transaction (concurrently), so a failed build is undone by hand: the
    // base gets back every field it had, and its old index.
    if dimension != row.dimension {
        if let Err(e) = build_index(state, id).await {
            if !repo::restore(state.db(), id, wrote, &KbFields::of(&row)).await? {
                // Edited or given documents since: what it is now is kept, and so is the
                // error, for the index of its shape is still to be built.
                tracing::error!(rag_id = id, error = %e, "a knowledge base's new index failed and the base changed since; not undone");
                return Err(e);
            }
            if let Err(again) = build_index(state, id).await {
                // Searches stay right without it (an exact scan of the base's chunks), slower.
                tracing::error!(rag_id = id, error = %again, "the old vector index of a knowledge base could not be rebuilt");
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Drops an empty base's collection, index or table of one side in a store of its own
/// (Milvus, OpenSearch, another PostgreSQL) before its length or its store changes: made at the
/// base's first write and kept when its documents go, one at the old length refused every new
/// vector, and the base could index nothing again; one on a store the base left stayed there
/// for good. The next write makes it again. Named after the base alone, one left on a store
/// the base moves to (from an earlier stay there) is dropped too. A store that cannot drop
/// what the base will use leaves the base as it was; one the base leaves keeps its entries,
/// logged.
async fn drop_entries(
    state: &AppState,
    tx: &mut PgConnection,
    before: &KbRow,
    side: Side,
    moved: bool,
) -> AppResult<()> {
    let left = Indexes::read_on(&mut *tx, state, before).await?;
    if let Err(e) = left.drop_side(tx, side).await {
        if !moved {
            return Err(store_error(e));
        }
        tracing::warn!(rag_id = before.id, ?side, error = %e, "the entries a knowledge base left could not be dropped");
    }
    if moved {
        let now = repo::find(&mut *tx, before.id)
            .await?
            .ok_or_else(|| AppError::not_found("knowledge base"))?;
        let joined = Indexes::read_on(&mut *tx, state, &now).await?;
        joined.drop_side(tx, side).await.map_err(store_error)?;
    }
    Ok(())
}

async fn build_index(state: &AppState, id: i64) -> AppResult<()> {
    let mut conn = state.db().acquire().await?;
    Ok(repo::build_index(&mut conn, id).await?)
}

pub async fn update_config(state: &AppState, user: &CurrentUser, id: i64, req: KbConfigRequest) -> AppResult<()> {
    let row = owned(state, user, id).await?;
    let chunk = match &req.chunk_params {
        Some(p) => {
            let mut merged: ChunkSettings = merge(&row.chunk_params.0, p, "chunkParams")?;
            merged.normalize();
            merged.fit_overlap(p.get("chunkOverlap").is_some());
            merged
        }
        None => row.chunk_params.0.clone(),
    };
    chunk.params().map_err(|e| named_in_section("chunkParams", e))?;
    let mut models = NamedModels::new(state, user);
    if let Some(id) = chunk
        .chunk_model_id
        .filter(|m| Some(*m) != row.chunk_params.0.chunk_model_id)
    {
        models.check("chunkParams.chunkModelId", id, ModelType::Chat).await?;
    }
    let parse = match &req.parse_params {
        Some(p) => {
            let mut merged: ParseSettings = merge(&row.parse_params.0, p, "parseParams")?;
            merged.normalize();
            merged
        }
        None => row.parse_params.0.clone(),
    };
    parse.check().map_err(|e| named_in_section("parseParams", e))?;
    let search = match &req.search_params {
        Some(p) => merge(&row.search_params.0, p, "searchParams")?,
        None => row.search_params.0.clone(),
    };
    search.check()?;
    if let Some(r) = search
        .rerank_model_id
        .filter(|r| Some(*r) != row.search_params.0.rerank_model_id)
    {
        models
            .check_in_chats("searchParams.rerankModelId", r, ModelType::Reranker)
            .await?;
    }
    let model = match &req.model_params {
        Some(p) => merge(&row.model_params.0, p, "modelParams")?,
        None => row.model_params.0.clone(),
    };
    model.check()?;
    if let Some(m) = model.model_id.filter(|m| Some(*m) != row.model_params.0.model_id) {
        models.check("modelParams.modelId", m, ModelType::Chat).await?;
    }
    let fields = KbFields {
        rerank_model_id: search.rerank_model_id,
        chunk: &chunk,
        parse: &parse,
        search: &search,
        model: &model,
        ..KbFields::of(&row)
    };
    let mut tx = state.db().begin().await?;
    models.hold(&mut tx, Some(id)).await?;
    if repo::update(&mut *tx, id, row.update_dt, &fields).await?.is_none() {
        return Err(AppError::changed_meanwhile("knowledge base"));
    }
    tx.commit().await?;
    Ok(())
}

/// Deletes the base with every document, chunk, vector, image and stored file. Store entries
/// are removed before the rows commit, files after it with their keys noted, as a document's
/// are (see there).
pub async fn delete(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    let kb = owned(state, user, id).await?;
    let indexes = Indexes::of(state, &kb).await?;
    let mut tx = state.db().begin().await?;
    // Pending uploads' files too: their previews would go with the base's row (a cascade),
    // and nothing would find the files or their resource rows again. Taken first, as a commit
    // takes its preview before the base's additions lock: a commit in flight finishes (and
    // its preview is gone), a later one finds no preview.
    let mut keys = crate::rag::documents::repo::remove_previews_of(&mut tx, id).await?;
    // Imports adding documents meanwhile finish first, and their files are among the keys;
    // later ones wait and find the base gone.
    crate::rag::documents::repo::lock_additions(&mut tx, id).await?;
    keys.extend(repo::object_keys(&mut tx, id).await?);
    repo::delete(&mut *tx, id).await?;
    crate::resources::leftovers::going(&mut tx, &keys).await?;
    indexes.drop_all(&mut tx).await.map_err(store_error)?;
    tx.commit().await?;
    crate::resources::leftovers::delete(state, &keys).await;
    // Its chunks went with the rows; the empty index is dropped after them, concurrently. The
    // base is deleted whatever happens to the drop: housekeeping drops what is left.
    let dropped = async {
        let mut conn = state.db().acquire().await?;
        repo::drop_index(&mut conn, id).await
    };
    if let Err(e) = dropped.await {
        tracing::warn!(rag_id = id, error = %e, "a deleted knowledge base's vector index was left for housekeeping");
    }
    Ok(())
}

/// Drops the vector indexes of deleted bases whose drop failed (housekeeping); how many.
pub async fn drop_orphan_indexes(state: &AppState) -> anyhow::Result<u64> {
    let ids = repo::orphan_indexes(state.db()).await?;
    let mut conn = state.db().acquire().await?;
    for &id in &ids {
        repo::drop_index(&mut conn, id).await?;
    }
    Ok(ids.len() as u64)
}
