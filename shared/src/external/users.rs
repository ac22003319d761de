//! External users: a partner's end users, one per app and openId.

use super::model::{ExternalUserView, RegisterRequest};
use super::repo::{self, UserData};
use crate::domain::AppCaller;
use crate::{validate, AppError, AppResult, AppState};

pub fn check_open_id(value: Option<String>) -> AppResult<String> {
    let open_id = validate::required("openId", value)?;
    validate::length("openId", &open_id, 1, 128)?;
    Ok(open_id)
}

fn limited(field: &str, value: Option<String>, max: usize) -> AppResult<Option<String>> {
    let value = value.map(|v| v.trim().to_owned());
    if let Some(v) = &value {
        validate::length(field, v, 0, max)?;
    }
    Ok(value)
}

/// What a partner may keep about one of its users in `extra`.
const MAX_EXTRA_BYTES: usize = 16 * 1024;

/// Registers the user, or updates the fields that were sent.
pub async fn register(state: &AppState, app: &AppCaller, req: RegisterRequest) -> AppResult<ExternalUserView> {
    let open_id = check_open_id(req.open_id)?;
    let nickname = limited("nickname", req.nickname, 100)?;
    let avatar = limited("avatar", req.avatar, 1000)?;
    if req.extra.as_ref().is_some_and(|e| !e.is_object()) {
        return Err(AppError::validation("extra must be a JSON object"));
    }
    if req
        .extra
        .as_ref()
        .is_some_and(|e| e.to_string().len() > MAX_EXTRA_BYTES)
    {
        return Err(AppError::validation(format!(
            "extra must be at most {MAX_EXTRA_BYTES} bytes as JSON"
        )));
    }
    let data = UserData {
        app: app.id,
        open_id: &open_id,
        nickname: nickname.as_deref(),
        avatar: avatar.as_deref(),
        extra: req.extra.as_ref(),
    };
    let (row, _) = repo::upsert_user(state.db(), &data).await?;
    Ok(row.into())
}

pub async fn info(state: &AppState, app: &AppCaller, open_id: Option<String>) -> AppResult<ExternalUserView> {
    let open_id = check_open_id(open_id)?;
    repo::find_user(state.db(), app.id, &open_id)
        .await?
        .map(Into::into)
        .ok_or_else(|| AppError::NotFound(format!("external user {open_id} not found")))
}

/// The user's id if registered (reads never create users).
pub async fn existing(state: &AppState, app: &AppCaller, open_id: &str) -> AppResult<Option<i64>> {
    Ok(repo::find_user(state.db(), app.id, open_id).await?.map(|u| u.id))
}

/// The user's id, registering a bare user on first contact (chat, subscribe, new conversation);
/// `true` when created. A user this process found or created for the app is not read again
/// (`crate::auth::verified_apps`).
pub async fn ensure(state: &AppState, app: &AppCaller, open_id: &str) -> AppResult<(i64, bool)> {
    if let Some(id) = state.verified_apps().user((app.id, &app.app_id), open_id) {
        return Ok((id, false));
    }
    let ensured = repo::ensure_user(state.db(), app.id, open_id).await?;
    state
        .verified_apps()
        .put_user((app.id, &app.app_id), open_id, ensured.0);
    Ok(ensured)
}

/// Removes a user this request created (a first chat that was refused leaves nothing behind).
pub async fn remove_created(state: &AppState, app: &AppCaller, open_id: &str, id: i64) -> AppResult<()> {
    state.verified_apps().forget_user(&app.app_id, open_id);
    Ok(repo::delete_user(state.db(), id).await?)
}
