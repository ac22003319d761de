//! Business rules of providers and model configs.

use serde_json::Value;
use sqlx::PgConnection;

use super::repo::{self, ConfigFields, ConfigQuery, EnableTarget, ProviderFields, Visibility};
use super::*;
use crate::crypto::is_masked;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::error::{is_foreign_key_violation, is_unique_violation};
use crate::outbound::Reach;
use crate::{validate, AppError, AppResult, AppState};

fn visibility(user: &CurrentUser) -> Visibility {
    Visibility {
        user_id: user.id,
        is_admin: user.is_admin(),
    }
}

// ---- providers ----

pub async fn providers(state: &AppState, enabled_only: bool) -> AppResult<Vec<ProviderView>> {
    Ok(repo::providers(state.db(), enabled_only)
        .await?
        .into_iter()
        .map(ProviderView::from)
        .collect())
}

pub async fn provider(state: &AppState, id: i64) -> AppResult<ProviderView> {
    repo::provider(state.db(), id)
        .await?
        .map(ProviderView::from)
        .ok_or_else(|| AppError::not_found("provider"))
}

fn provider_key(key: &str) -> AppResult<()> {
    validate::length("providerKey", key, 1, 64)?;
    if !key.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(AppError::validation(
            "providerKey may contain only letters, digits and - _ .",
        ));
    }
    Ok(())
}

fn provider_conflict(err: sqlx::Error) -> AppError {
    if is_unique_violation(&err, "model_providers_key_key") {
        AppError::business("providerKey is already used by another provider")
    } else {
        err.into()
    }
}

/// An icon every administrator's console shows as an image: an http(s) address, a path on
/// the console's own site, or an inline image; never a script (`javascript:`).
fn icon(url: Option<&str>) -> AppResult<()> {
    validate::at_most("iconUrl", url, validate::MAX_URL)?;
    let Some(url) = url.filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    let lower = url.to_ascii_lowercase();
    let image = ["https://", "http://", "data:image/"]
        .iter()
        .any(|p| lower.starts_with(p))
        || url.starts_with('/');
    match image && !url.chars().any(char::is_control) {
        true => Ok(()),
        false => Err(AppError::validation(
            "iconUrl must be an http(s) URL, a path beginning with /, or a data:image/ URL",
        )),
    }
}

pub async fn create_provider(state: &AppState, user: &CurrentUser, req: ProviderRequest) -> AppResult<i64> {
    user.require_admin()?;
    let name = validate::required("providerName", req.provider_name)?;
    validate::length("providerName", &name, 1, 100)?;
    validate::printable("providerName", &name, false)?;
    let key = validate::required("providerKey", req.provider_key)?;
    provider_key(&key)?;
    let (description, icon_url) = (validate::optional(req.description), validate::optional(req.icon_url));
    validate::at_most("description", description.as_deref(), validate::MAX_DESCRIPTION)?;
    icon(icon_url.as_deref())?;
    let fields = ProviderFields {
        name: Some(&name),
        key: Some(&key),
        description: description.as_deref(),
        icon_url: icon_url.as_deref(),
        is_enabled: req.is_enabled,
    };
    repo::insert_provider(state.db(), &fields)
        .await
        .map_err(provider_conflict)
}

pub async fn update_provider(state: &AppState, user: &CurrentUser, id: i64, req: ProviderRequest) -> AppResult<()> {
    user.require_admin()?;
    let name = req
        .provider_name
        .map(|n| validate::required("providerName", Some(n)))
        .transpose()?;
    if let Some(n) = &name {
        validate::length("providerName", n, 1, 100)?;
        validate::printable("providerName", n, false)?;
    }
    let key = req
        .provider_key
        .map(|k| validate::required("providerKey", Some(k)))
        .transpose()?;
    if let Some(k) = &key {
        provider_key(k)?;
    }
    // Trimmed; a blank one clears the field (the statement stores NULL, never '').
    let (description, icon_url) = (
        req.description.as_deref().map(str::trim),
        req.icon_url.as_deref().map(str::trim),
    );
    validate::at_most("description", description, validate::MAX_DESCRIPTION)?;
    icon(icon_url)?;
    let fields = ProviderFields {
        name: name.as_deref(),
        key: key.as_deref(),
        description,
        icon_url,
        is_enabled: req.is_enabled,
    };
    if !repo::update_provider(state.db(), id, &fields)
        .await
        .map_err(provider_conflict)?
    {
        return Err(AppError::not_found("provider"));
    }
    Ok(())
}

pub async fn delete_provider(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    user.require_admin()?;
    let configs = repo::provider_config_count(state.db(), id).await?;
    if configs > 0 {
        return Err(AppError::business(format!(
            "the provider still has {configs} model configs; delete them first"
        )));
    }
    // A config created meanwhile holds the provider through its foreign key.
    let deleted = repo::delete_provider(state.db(), id).await.map_err(|e| {
        match is_foreign_key_violation(&e, PROVIDER_OF_CONFIG) {
            true => AppError::business("a model config was created under the provider meanwhile; delete it first"),
            false => e.into(),
        }
    })?;
    if !deleted {
        return Err(AppError::not_found("provider"));
    }
    Ok(())
}

pub async fn set_provider_enabled(state: &AppState, user: &CurrentUser, id: i64, enabled: bool) -> AppResult<()> {
    user.require_admin()?;
    if !repo::set_enabled(state.db(), EnableTarget::Provider, id, enabled).await? {
        return Err(AppError::not_found("provider"));
    }
    Ok(())
}

/// The foreign key from a model config to its provider.
const PROVIDER_OF_CONFIG: &str = "model_configs_provider_id_fkey";

/// A config's write that names provider `id`, deleted since it was checked: as unknown as it
/// would have been.
fn provider_gone(id: i64) -> impl Fn(sqlx::Error) -> AppError {
    move |e| match is_foreign_key_violation(&e, PROVIDER_OF_CONFIG) {
        true => unknown_provider(id),
        false => e.into(),
    }
}

// ---- model configs ----

/// GLOBAL configs are everyone's; a PERSONAL one is its creator's (and administrators').
fn can_see(user: &CurrentUser, row: &ModelConfigRow) -> bool {
    row.scope != "PERSONAL" || user.can_manage(row.creator_id)
}

/// A config the caller may see, or 404.
pub async fn visible_config(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<ModelConfigRow> {
    repo::config(state.db(), id)
        .await?
        .filter(|row| can_see(user, row))
        .ok_or_else(|| AppError::not_found("model config"))
}

/// A model id taken from a request: the field that named it and the type it must have.
#[derive(Clone, Copy)]
pub struct ModelRef<'a> {
    pub field: &'a str,
    pub id: i64,
    pub t: ModelType,
}

/// The one rule for a model id taken from a request (to store it or to call it): an enabled
/// config of type `t` that `user` can see. An unknown id, another user's PERSONAL model, a
/// disabled one and one of the wrong type all get the same validation error naming `field`,
/// so the answer never tells whether someone else's model exists. Otherwise a user could put
/// another user's PERSONAL model (and so its API key) to work in their own base or config.
fn usable_or_refused(user: &CurrentUser, r: ModelRef<'_>, row: Option<ModelConfigRow>) -> AppResult<ModelConfigRow> {
    row.filter(|row| can_see(user, row) && row.model_type() == r.t && row.is_usable())
        .ok_or_else(|| {
            AppError::validation(format!(
                "{}: model {} does not exist or is not an enabled {} model you can use",
                r.field,
                r.id,
                r.t.as_str()
            ))
        })
}

/// A model the caller may use, ready to call: for calls on their behalf with a model that came
/// from elsewhere (an agent's config may be built on its creator's PERSONAL model, their key).
pub async fn usable_model(
    state: &AppState,
    user: &CurrentUser,
    field: &str,
    id: i64,
    t: ModelType,
) -> AppResult<super::gateway::ModelHandle> {
    let row = usable_config(state, user, field, id, t).await?;
    super::gateway::checked(state, id, Some(row), t)
}

/// The config a request names, checked by `usable_or_refused`.
pub async fn usable_config(
    state: &AppState,
    user: &CurrentUser,
    field: &str,
    id: i64,
    t: ModelType,
) -> AppResult<ModelConfigRow> {
    usable_or_refused(user, ModelRef { field, id, t }, repo::config(state.db(), id).await?)
}

/// The configs `refs` name, held (`FOR SHARE`) until the caller's transaction ends and checked
/// again under the hold. A retype counts the config's users under its row lock
/// (`update_config`): it either waits for the binding being written and counts it, or is seen
/// here; checked apart, a config could become a RERANKER while an agent was being bound to
/// it as its chat model.
pub async fn hold_usable(conn: &mut PgConnection, user: &CurrentUser, refs: &[ModelRef<'_>]) -> AppResult<()> {
    if refs.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = refs.iter().map(|r| r.id).collect();
    let rows = repo::configs_held(conn, &ids).await?;
    for r in refs {
        usable_or_refused(user, *r, rows.iter().find(|row| row.id == r.id).cloned())?;
    }
    Ok(())
}

/// A config the caller may change (`manages`).
async fn managed_config(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<ModelConfigRow> {
    let row = visible_config(state, user, id).await?;
    if !row.managed_by(user) {
        return Err(AppError::Forbidden(
            "only administrators may change GLOBAL model configs".into(),
        ));
    }
    Ok(row)
}

fn parse_scope(value: &str) -> AppResult<&'static str> {
    match value.trim().to_ascii_uppercase().as_str() {
        "GLOBAL" => Ok("GLOBAL"),
        "PERSONAL" => Ok("PERSONAL"),
        _ => Err(AppError::validation("scope must be GLOBAL or PERSONAL")),
    }
}

/// `reach` is the reach of the config's creator: the networks its calls may go to.
async fn validate_endpoint(state: &AppState, url: &str, reach: Reach) -> AppResult<()> {
    validate::length("apiEndpoint", url, 1, validate::MAX_URL)?;
    let parsed = reqwest::Url::parse(url).map_err(|_| AppError::validation("apiEndpoint must be an http(s) URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(AppError::validation("apiEndpoint must be an http(s) URL"));
    }
    // The address is shown in errors and logs; the key has a field of its own, kept sealed.
    validate::without_credentials("apiEndpoint", &parsed, "send the key as apiKey")?;
    if parsed.fragment().is_some() {
        return Err(AppError::validation("apiEndpoint must not have a fragment (#...)"));
    }
    state.config().outbound.deny(reach).check_url("apiEndpoint", url).await
}

/// The most a config's `configJson` holds, as JSON: configs are listed whole (an
/// administrator's list holds everyone's PERSONAL ones), and three of a user's near the body's
/// 2 MiB took the list past Lambda's 6 MB answer.
pub const MAX_CONFIG_JSON_BYTES: usize = 16 * 1024;

/// Known `configJson` keys must have the right types; unknown keys are kept as they are, within
/// `MAX_CONFIG_JSON_BYTES` in all.
pub fn validate_config_json(v: &Value) -> AppResult<()> {
    let obj = v
        .as_object()
        .ok_or_else(|| AppError::validation("configJson must be a JSON object"))?;
    if v.to_string().len() > MAX_CONFIG_JSON_BYTES {
        return Err(AppError::validation(format!(
            "configJson may hold at most {MAX_CONFIG_JSON_BYTES} bytes of JSON"
        )));
    }
    let bad = |key: &str, rule: &str| AppError::validation(format!("configJson.{key} must be {rule}"));
    let number_in = |key: &str, min: f64, max: f64| -> AppResult<()> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(()),
            Some(x) => match x.as_f64() {
                Some(n) if n >= min && n <= max => Ok(()),
                _ => Err(bad(key, &format!("a number from {min} to {max}"))),
            },
        }
    };
    let int_in = |key: &str, min: u64, max: u64| -> AppResult<()> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(()),
            Some(x) => match x.as_u64() {
                Some(n) if n >= min && n <= max => Ok(()),
                _ => Err(bad(key, &format!("a whole number from {min} to {max}"))),
            },
        }
    };
    number_in("temperature", 0.0, 2.0)?;
    int_in("maxTokens", 1, 1_000_000)?;
    int_in("timeoutSecs", 1, 600)?;
    int_in("maxRetries", 0, 5)?;
    int_in("batchSize", 1, 2048)?;
    number_in("inputPricePer1k", 0.0, 1e6)?;
    number_in("outputPricePer1k", 0.0, 1e6)?;
    if let Some(c) = obj.get("capabilities").filter(|c| !c.is_null()) {
        if !c.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
            return Err(bad("capabilities", "an array of strings"));
        }
    }
    if obj
        .get("defaultVisionModel")
        .is_some_and(|d| !d.is_boolean() && !d.is_null())
    {
        return Err(bad("defaultVisionModel", "true or false"));
    }
    for key in ["queryInputType", "documentInputType"] {
        if obj.get(key).is_some_and(|d| !d.is_string() && !d.is_null()) {
            return Err(bad(key, "a string"));
        }
    }
    if obj
        .get("rerankScores")
        .is_some_and(|s| !s.is_null() && !matches!(s.as_str(), Some("logits" | "probabilities")))
    {
        return Err(bad("rerankScores", "\"logits\" or \"probabilities\""));
    }
    Ok(())
}

pub async fn page_configs(
    state: &AppState,
    user: &CurrentUser,
    paging: PageQuery,
    f: ConfigFilter,
) -> AppResult<Page<ModelConfigView>> {
    let model_type = validate::optional(f.model_type)
        .map(|t| ModelType::parse("modelType", &t))
        .transpose()?;
    let scope = validate::optional(f.scope).map(|s| parse_scope(&s)).transpose()?;
    let provider_key = validate::optional(f.provider_key);
    let q = ConfigQuery {
        provider_key: provider_key.as_deref(),
        model_type: model_type.map(ModelType::as_str),
        scope,
        enabled_only: false,
    };
    let (rows, total) = repo::configs(state.db(), &q, visibility(user), Some((paging.size(), paging.offset()))).await?;
    let views = rows
        .into_iter()
        .map(|r| ModelConfigView::new(r, state.secrets(), user))
        .collect();
    Ok(Page::new(views, paging, total))
}

pub async fn config(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<ModelConfigView> {
    Ok(ModelConfigView::new(
        visible_config(state, user, id).await?,
        state.secrets(),
        user,
    ))
}

/// Checks a create or update, given the config's values after the change.
struct Checked {
    model_type: ModelType,
    scope: &'static str,
    adapter: String,
}

fn check_combination(
    user: &CurrentUser,
    model_type: ModelType,
    scope: &'static str,
    adapter: Option<String>,
) -> AppResult<Checked> {
    if scope == "GLOBAL" && !user.is_admin() {
        return Err(AppError::Forbidden(
            "only administrators may create or change GLOBAL model configs".into(),
        ));
    }
    let adapter = adapter.unwrap_or_else(|| adapters::default_for(model_type).to_owned());
    if !adapters::supports(&adapter, model_type) {
        return Err(AppError::validation(format!(
            "adapterKey {adapter} does not support {} models",
            model_type.as_str()
        )));
    }
    Ok(Checked {
        model_type,
        scope,
        adapter,
    })
}

fn unknown_provider(provider_id: i64) -> AppError {
    AppError::validation(format!("providerId: provider {provider_id} does not exist"))
}

async fn ensure_provider(state: &AppState, provider_id: i64) -> AppResult<()> {
    if repo::provider(state.db(), provider_id).await?.is_none() {
        return Err(unknown_provider(provider_id));
    }
    Ok(())
}

pub async fn create_config(state: &AppState, user: &CurrentUser, req: ModelConfigRequest) -> AppResult<i64> {
    let provider_id = validate::present("providerId", req.provider_id)?;
    let model_name = validate::required("modelName", req.model_name)?;
    validate::length("modelName", &model_name, 1, 200)?;
    validate::printable("modelName", &model_name, false)?;
    let model_key = validate::required("modelKey", req.model_key)?;
    validate::length("modelKey", &model_key, 1, 200)?;
    validate::printable("modelKey", &model_key, false)?;
    let model_type = ModelType::parse("modelType", &validate::required("modelType", req.model_type)?)?;
    let api_key = validate::required("apiKey", req.api_key)?;
    if is_masked(&api_key) {
        return Err(AppError::validation("apiKey must be the real key, not a masked value"));
    }
    validate::header_secret("apiKey", &api_key)?;
    let api_endpoint = validate::required("apiEndpoint", req.api_endpoint)?;
    validate_endpoint(state, &api_endpoint, Reach::of_admin(user.is_admin())).await?;
    if let Some(c) = &req.config_json {
        validate_config_json(c)?;
    }
    let default_scope = if user.is_admin() { "GLOBAL" } else { "PERSONAL" };
    let scope = validate::optional(req.scope)
        .map(|s| parse_scope(&s))
        .transpose()?
        .unwrap_or(default_scope);
    let checked = check_combination(user, model_type, scope, validate::optional(req.adapter_key))?;
    let vision = marks_vision(req.config_json.as_ref(), checked.model_type, checked.scope)?;
    let is_default = req.is_default.unwrap_or(false);
    if is_default {
        require_default_rules(user, checked.scope)?;
    }
    ensure_provider(state, provider_id).await?;
    let sealed = state.secrets().seal(&api_key)?;
    let description = validate::optional(req.description);
    validate::at_most("description", description.as_deref(), validate::MAX_DESCRIPTION)?;
    let fields = ConfigFields {
        provider_id: Some(provider_id),
        model_name: Some(&model_name),
        model_key: Some(&model_key),
        model_type: Some(checked.model_type.as_str()),
        adapter_key: Some(&checked.adapter),
        api_key_enc: Some(&sealed),
        key_set_by: Some(user.id),
        api_endpoint: Some(&api_endpoint),
        description: description.as_deref(),
        config_json: req.config_json.as_ref(),
        scope: Some(checked.scope),
        is_enabled: req.is_enabled,
    };
    let mut tx = state.db().begin().await?;
    let id = repo::insert_config(&mut *tx, &fields, user.id)
        .await
        .map_err(provider_gone(provider_id))?;
    if is_default {
        make_default(&mut tx, id, checked.model_type.as_str()).await?;
    }
    if vision {
        repo::lock_for_vision_mark(&mut tx, id).await?;
        repo::unmark_vision_but(&mut tx, id).await?;
    }
    tx.commit().await?;
    Ok(id)
}

/// Whether `config_json` marks the config `defaultVisionModel`, which only a GLOBAL CHAT model
/// may be: image reading (`rag::vision`) takes GLOBAL CHAT models only, and a mark anywhere
/// else showed as in force and read nothing.
fn marks_vision(config_json: Option<&Value>, model_type: ModelType, scope: &str) -> AppResult<bool> {
    let marked = config_json.and_then(|c| c.get("defaultVisionModel")) == Some(&Value::Bool(true));
    if marked && (model_type != ModelType::Chat || scope != "GLOBAL") {
        return Err(AppError::validation(
            "configJson.defaultVisionModel: only a GLOBAL CHAT model can be the default vision model",
        ));
    }
    Ok(marked)
}

fn require_default_rules(user: &CurrentUser, scope: &str) -> AppResult<()> {
    user.require_admin()?;
    if scope != "GLOBAL" {
        return Err(AppError::validation(
            "isDefault: only a GLOBAL model can be the default",
        ));
    }
    Ok(())
}

pub async fn update_config(state: &AppState, user: &CurrentUser, id: i64, req: ModelConfigRequest) -> AppResult<()> {
    let row = managed_config(state, user, id).await?;
    let non_blank = |field: &str, v: Option<String>| v.map(|v| validate::required(field, Some(v))).transpose();
    let model_name = non_blank("modelName", req.model_name)?;
    let model_key = non_blank("modelKey", req.model_key)?;
    for (field, value) in [("modelName", &model_name), ("modelKey", &model_key)] {
        if let Some(v) = value {
            validate::length(field, v, 1, 200)?;
            validate::printable(field, v, false)?;
        }
    }
    let api_endpoint = non_blank("apiEndpoint", req.api_endpoint)?;
    if let Some(e) = &api_endpoint {
        validate_endpoint(state, e, row.reach()).await?;
    }
    if let Some(c) = &req.config_json {
        validate_config_json(c)?;
    }
    let model_type = match validate::optional(req.model_type) {
        Some(t) => ModelType::parse("modelType", &t)?,
        None => row.model_type(),
    };
    let scope = match validate::optional(req.scope) {
        Some(s) => parse_scope(&s)?,
        None => parse_scope(&row.scope)?,
    };
    let adapter = validate::optional(req.adapter_key).or_else(|| {
        // Keep the stored adapter unless the type changed under it.
        adapters::supports(&row.adapter_key, model_type).then(|| row.adapter_key.clone())
    });
    let checked = check_combination(user, model_type, scope, adapter)?;
    let will_be_default = req.is_default.unwrap_or(row.is_default);
    if will_be_default && (req.is_default == Some(true) || checked.scope != row.scope) {
        require_default_rules(user, checked.scope)?;
    }
    if let Some(p) = req.provider_id {
        ensure_provider(state, p).await?;
    }
    // A masked key sent back means "keep the stored one".
    let sealed = match validate::optional(req.api_key) {
        Some(k) if !is_masked(&k) => {
            validate::header_secret("apiKey", &k)?;
            Some(state.secrets().seal(&k)?)
        }
        _ => None,
    };
    // A stored key goes where whoever stored it said: anyone else pointing the config
    // elsewhere (an administrator, or its creator when an administrator stored the key) sends
    // a key of their own, or could read it at their endpoint.
    let moves = api_endpoint.as_deref().is_some_and(|e| e != row.api_endpoint);
    let others_key = sealed.is_none() && row.key_set_by != user.id;
    if moves && others_key {
        return Err(AppError::validation(
            "apiKey: send the key again to change apiEndpoint; the stored key is not yours",
        ));
    }
    // Nor does someone's key serve everyone without them: a PERSONAL config made GLOBAL by an
    // administrator carries a key of theirs.
    if checked.scope == "GLOBAL" && row.scope != "GLOBAL" && others_key {
        return Err(AppError::validation(
            "apiKey: send a key of your own to make this config GLOBAL; the stored key is not yours",
        ));
    }
    // Trimmed; a blank one clears it (the statement stores NULL, never '').
    let description = req.description.as_deref().map(str::trim);
    validate::at_most("description", description, validate::MAX_DESCRIPTION)?;
    let fields = ConfigFields {
        provider_id: req.provider_id,
        model_name: model_name.as_deref(),
        model_key: model_key.as_deref(),
        model_type: Some(checked.model_type.as_str()),
        adapter_key: Some(&checked.adapter),
        api_key_enc: sealed.as_deref(),
        key_set_by: sealed.is_some().then_some(user.id),
        api_endpoint: api_endpoint.as_deref(),
        description,
        config_json: req.config_json.as_ref(),
        scope: Some(checked.scope),
        is_enabled: req.is_enabled,
    };
    // A default whose type changes stops being the default of its old type (and is the new
    // type's only when asked). The flag goes before the type changes: for the length of the
    // update the row would otherwise be a second default of the new type.
    let retyped = checked.model_type != row.model_type();
    // A mark stored before marks were checked stays until configJson, the scope or the type
    // is edited: checked on every edit, it kept a key from being rotated.
    let vision = match req.config_json.is_some() || checked.scope != row.scope || retyped {
        true => marks_vision(
            Some(req.config_json.as_ref().unwrap_or(&row.config_json)),
            checked.model_type,
            checked.scope,
        )?,
        false => false,
    };
    let mut tx = state.db().begin().await?;
    if req.is_default == Some(true) {
        // Before this row's own lock, which would otherwise come first whatever the ids.
        repo::lock_for_default_switch(&mut tx, id, checked.model_type.as_str()).await?;
    }
    if vision {
        repo::lock_for_vision_mark(&mut tx, id).await?;
    }
    // Everything above was checked against the row as read; written over a change made since
    // (a retype, a scope change), this would undo it unchecked.
    match repo::lock_unchanged(&mut tx, id, row.updated_dt).await? {
        None => return Err(AppError::not_found("model config")),
        Some(false) => return Err(AppError::changed_meanwhile("model config")),
        Some(true) => {}
    }
    // What uses the config uses it as a model of its type: a base's embedding model turned
    // CHAT would fail every search and ingest, and could not be swapped while it has documents.
    if retyped {
        let users = repo::users_count(&mut *tx, id).await?;
        if users > 0 {
            return Err(AppError::business(format!(
                "modelType cannot change while {users} knowledge bases, agents or memory configs use this model config"
            )));
        }
    }
    // A PERSONAL config is its creator's to re-point and re-key: made PERSONAL while others'
    // agents, bases or memory configs use it, their conversations and documents would go
    // wherever the creator points it next.
    if checked.scope != "GLOBAL" && row.scope == "GLOBAL" {
        let others = repo::others_users_count(&mut *tx, id, Some(row.creator_id)).await?;
        if others > 0 {
            return Err(AppError::business(format!(
                "scope cannot become PERSONAL while {others} knowledge bases, agents or memory configs of other users use this model config"
            )));
        }
    }
    if row.is_default && (retyped || req.is_default == Some(false)) {
        repo::clear_default(&mut tx, id).await?;
    }
    let provider = req.provider_id.unwrap_or(row.provider_id);
    repo::update_config(&mut *tx, id, &fields)
        .await
        .map_err(provider_gone(provider))?;
    if req.is_default == Some(true) {
        make_default(&mut tx, id, checked.model_type.as_str()).await?;
    }
    if vision {
        repo::unmark_vision_but(&mut tx, id).await?;
    }
    tx.commit().await.map_err(Into::into)
}

/// Refused while a knowledge base or a memory config embeds with the config: their stored
/// vectors are that model's, so they cannot lose it (every other reference is cleared with the
/// config, see `repo::delete_config`).
pub async fn delete_config(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<()> {
    managed_config(state, user, id).await?;
    repo::delete_config(state.db(), id).await.map_err(|e| {
        let user_of = match &e {
            sqlx::Error::Database(db) => match db.constraint() {
                Some("knowledge_bases_embedding_model_id_fkey") => Some("a knowledge base"),
                Some("memory_configs_embedding_model_id_fkey") => Some("a memory config"),
                _ => None,
            },
            _ => None,
        };
        match user_of {
            Some(user_of) => AppError::business(format!(
                "model config {id} is the embedding model of {user_of}; delete that first or disable the model instead"
            )),
            None => e.into(),
        }
    })?;
    Ok(())
}

pub async fn set_config_enabled(state: &AppState, user: &CurrentUser, id: i64, enabled: bool) -> AppResult<()> {
    managed_config(state, user, id).await?;
    repo::set_enabled(state.db(), EnableTarget::Config, id, enabled).await?;
    Ok(())
}

/// Enabled configs of enabled providers, of one type (and provider), that the caller can use.
pub async fn usable(
    state: &AppState,
    user: &CurrentUser,
    model_type: ModelType,
    provider_key: Option<&str>,
) -> AppResult<Vec<ModelConfigRow>> {
    let q = ConfigQuery {
        provider_key,
        model_type: Some(model_type.as_str()),
        scope: None,
        enabled_only: true,
    };
    Ok(repo::configs(state.db(), &q, visibility(user), None).await?.0)
}

pub async fn defaults(state: &AppState, user: &CurrentUser) -> AppResult<DefaultModels> {
    let get = |t: ModelType| async move { repo::default_config(state.db(), t.as_str()).await };
    let view = |r: Option<ModelConfigRow>| r.map(|r| ModelConfigView::new(r, state.secrets(), user));
    Ok(DefaultModels {
        chat: view(get(ModelType::Chat).await?),
        embedding: view(get(ModelType::Embedding).await?),
        reranker: view(get(ModelType::Reranker).await?),
    })
}

pub async fn default_of(
    state: &AppState,
    user: &CurrentUser,
    model_type: ModelType,
) -> AppResult<Option<ModelConfigView>> {
    Ok(repo::default_config(state.db(), model_type.as_str())
        .await?
        .map(|r| ModelConfigView::new(r, state.secrets(), user)))
}

pub async fn switch_default(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<bool> {
    user.require_admin()?;
    let row = repo::config(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("model config"))?;
    require_default_rules(user, &row.scope)?;
    if !row.is_enabled {
        return Err(AppError::business(
            "a disabled model cannot be the default; enable it first",
        ));
    }
    // Chat takes no default whose provider is off: made one, every agent without a model of its
    // own failed with "no default model" while `/default` named it.
    if !row.provider_enabled {
        return Err(AppError::business(
            "a model of a disabled provider cannot be the default; enable its provider first",
        ));
    }
    let mut tx = state.db().begin().await?;
    make_default(&mut tx, id, &row.model_type).await?;
    tx.commit().await?;
    Ok(true)
}

/// `repo::switch_default`, refused when the config is not (or no longer) an enabled GLOBAL
/// config of that type: one changed between the caller's checks and this would otherwise
/// become a PERSONAL default, or the default of a type it no longer has.
async fn make_default(conn: &mut sqlx::PgConnection, id: i64, model_type: &str) -> AppResult<()> {
    if !repo::switch_default(conn, id, model_type).await? {
        return Err(AppError::business(
            "isDefault: only an enabled GLOBAL model of an enabled provider can be the default (the model changed meanwhile, or is disabled)",
        ));
    }
    Ok(())
}

/// Whoever manages a config may test it while it is disabled, or its provider is (before
/// enabling it); for anyone else it is out of use, as everywhere: not called on its key.
pub async fn test_config(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<TestResult> {
    let row = visible_config(state, user, id).await?;
    if !row.is_usable() && !row.managed_by(user) {
        return Err(AppError::business(format!(
            "model {id} is disabled (or its provider is); ask an administrator"
        )));
    }
    probe::run(state, row, user).await
}

/// Everyone's calls for administrators and for the creator of a PERSONAL model (calls through
/// their agents run on their key); anyone else sees their own calls: the totals of a GLOBAL
/// model are every tenant's traffic, which only `global-stats` (administrators) shows.
pub async fn model_stat(state: &AppState, user: &CurrentUser, id: i64) -> AppResult<UsageStat> {
    let row = visible_config(state, user, id).await?;
    let everyone = user.is_admin() || (row.scope == "PERSONAL" && row.creator_id == user.id);
    Ok(usage::for_model(state.db(), &row, (!everyone).then_some(user.id)).await?)
}

/// Per-model usage: the caller's own calls on models they can see (`Some`), or everyone's
/// (`None`, administrators).
pub async fn usage_stats(
    state: &AppState,
    caller: Option<&CurrentUser>,
    paging: PageQuery,
) -> AppResult<Page<UsageStat>> {
    let (rows, total) = usage::per_model(state.db(), caller.map(visibility), paging.size(), paging.offset()).await?;
    Ok(Page::new(rows, paging, total))
}
