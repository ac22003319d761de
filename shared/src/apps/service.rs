//! Business rules of app management (administrators only).

use base64::Engine as _;
use rand::RngCore;

use super::model::{AppFilter, AppInput, AppOption, AppRow, AppView, ClientNode};
use super::node_repo;
use super::repo::{self, AppChange, NewApp, PageFilter};
use crate::domain::DatetimeRange;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::error::is_unique_violation;
use crate::{validate, AppError, AppResult, AppState};

pub const ROUTE_STRATEGIES: [&str; 3] = ["ROUND_ROBIN", "RANDOM", "HASH"];

/// 256 random bits, URL-safe base64: the app's `Svc-Token`.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn check_app_id(value: Option<String>) -> AppResult<String> {
    let app_id = validate::required("appId", value)?;
    validate::length("appId", &app_id, 1, 64)?;
    if !app_id.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
        return Err(AppError::validation(
            "appId may only hold letters, digits, '_', '-' and '.'",
        ));
    }
    // Named in paths (`/app/{appId}/nodes`), where clients collapse these two.
    if app_id == "." || app_id == ".." {
        return Err(AppError::validation("appId may not be '.' or '..'"));
    }
    Ok(app_id)
}

fn check_name(value: Option<String>) -> AppResult<String> {
    let name = validate::required("appName", value)?;
    validate::length("appName", &name, 1, 100)?;
    Ok(name)
}

fn check_description(value: Option<String>) -> AppResult<Option<String>> {
    let description = validate::optional(value);
    if let Some(d) = &description {
        validate::length("description", d, 1, 500)?;
    }
    Ok(description)
}

fn check_strategy(value: Option<String>, current: &str) -> AppResult<String> {
    match validate::optional(value) {
        None => Ok(current.to_owned()),
        Some(s) => {
            let upper = s.to_ascii_uppercase();
            if ROUTE_STRATEGIES.contains(&upper.as_str()) {
                Ok(upper)
            } else {
                Err(AppError::validation(
                    "routeStrategy must be one of ROUND_ROBIN, RANDOM, HASH",
                ))
            }
        }
    }
}

fn view(state: &AppState, row: AppRow) -> AppResult<AppView> {
    let token = state.secrets().open(&row.token_enc)?;
    Ok(AppView::new(row, token))
}

async fn load(state: &AppState, id: i64) -> AppResult<AppRow> {
    repo::find(state.db(), id)
        .await?
        .ok_or_else(|| AppError::not_found("app"))
}

/// The app with this string identifier (`Svc-App-Id`).
pub async fn load_by_app_id(state: &AppState, app_id: &str) -> AppResult<AppRow> {
    repo::find_by_app_id(state.db(), app_id)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("app {app_id} not found")))
}

pub async fn page(
    state: &AppState,
    query: PageQuery,
    filter: AppFilter,
    range: DatetimeRange,
) -> AppResult<Page<AppView>> {
    if let Some(s) = filter.status {
        validate::range("status", s.into(), 0, 1)?;
    }
    let f = PageFilter {
        filter: &filter,
        created: range.0,
    };
    let (rows, total) = repo::page(state.db(), &f, query.size(), query.offset()).await?;
    let views = rows
        .into_iter()
        .map(|r| view(state, r))
        .collect::<AppResult<Vec<_>>>()?;
    Ok(Page::new(views, query, total))
}

pub async fn list(state: &AppState) -> AppResult<Vec<AppOption>> {
    Ok(repo::enabled(state.db()).await?.into_iter().map(Into::into).collect())
}

pub async fn create(state: &AppState, user: &CurrentUser, input: AppInput) -> AppResult<AppView> {
    let app_id = check_app_id(input.app_id)?;
    let app_name = check_name(input.app_name)?;
    let description = check_description(input.description)?;
    let route_strategy = check_strategy(input.route_strategy, ROUTE_STRATEGIES[0])?;
    let frame_ancestors = super::frame_ancestors::check(input.frame_ancestors.unwrap_or_default())?;
    let token_enc = state.secrets().seal(&new_token())?;
    let new = NewApp {
        app_id: &app_id,
        app_name: &app_name,
        description: description.as_deref(),
        token_enc: &token_enc,
        route_strategy: &route_strategy,
        frame_ancestors: &frame_ancestors,
        creator_id: user.id,
    };
    let id = repo::insert(state.db(), &new).await.map_err(|e| {
        if is_unique_violation(&e, "apps_app_id_key") {
            AppError::business(format!("appId {app_id} is already taken by another app"))
        } else {
            e.into()
        }
    })?;
    view(state, load(state, id).await?)
}

pub async fn update(state: &AppState, id: i64, input: AppInput) -> AppResult<AppView> {
    let current = load(state, id).await?;
    if input.app_id.as_deref().is_some_and(|a| a.trim() != current.app_id) {
        return Err(AppError::validation("appId cannot be changed after creation"));
    }
    let app_name = match input.app_name {
        Some(n) => check_name(Some(n))?,
        None => current.app_name.clone(),
    };
    let description = match input.description {
        Some(d) => check_description(Some(d))?,
        None => current.description.clone(),
    };
    let route_strategy = check_strategy(input.route_strategy, &current.route_strategy)?;
    let frame_ancestors = match input.frame_ancestors {
        Some(list) => super::frame_ancestors::check(list)?,
        None => current.frame_ancestors.clone(),
    };
    let change = AppChange {
        app_name: &app_name,
        description: description.as_deref(),
        route_strategy: &route_strategy,
        frame_ancestors: &frame_ancestors,
    };
    if !repo::update(state.db(), id, current.update_dt, &change).await? {
        return Err(AppError::changed_meanwhile("app"));
    }
    view(state, load(state, id).await?)
}

/// Deletes the app with everything of its external users, their uploaded images included;
/// an image file that is not removed now (it cannot be, or the request ends first: their keys
/// are noted with the rows' delete) is deleted later by the housekeeping.
pub async fn delete(state: &AppState, id: i64) -> AppResult<()> {
    let images = match repo::delete(state.db(), id).await? {
        repo::Deleted::Gone(images) => images,
        repo::Deleted::Missing => return Err(AppError::not_found("app")),
        repo::Deleted::Bound { app_id, agents } => {
            return Err(AppError::business(format!(
                "app {app_id} has {agents} agent(s) bound to it; bind them to another app or delete them \
                 first: unbound by the delete, they would be open to every app"
            )))
        }
    };
    state.verified_apps().forget(id);
    crate::resources::leftovers::delete(state, &images).await;
    Ok(())
}

/// Gives the app a new token: the old one, and every embed token signed with it, stop working
/// (at once here; within the verified-app cache's seconds in other functions). A leaked token
/// could otherwise be revoked only by deleting the app, with all of its end users' data.
pub async fn reset_token(state: &AppState, id: i64) -> AppResult<AppView> {
    let token_enc = state.secrets().seal(&new_token())?;
    if !repo::set_token(state.db(), id, &token_enc).await? {
        return Err(AppError::not_found("app"));
    }
    state.verified_apps().forget(id);
    view(state, load(state, id).await?)
}

pub async fn toggle_status(state: &AppState, id: i64) -> AppResult<()> {
    if !repo::toggle_status(state.db(), id).await? {
        return Err(AppError::not_found("app"));
    }
    state.verified_apps().forget(id);
    Ok(())
}

pub async fn nodes(state: &AppState, app_id: &str) -> AppResult<Vec<ClientNode>> {
    let app = load_by_app_id(state, app_id).await?;
    Ok(node_repo::of_app(state.db(), app.id)
        .await?
        .into_iter()
        .map(Into::into)
        .collect())
}

pub async fn all_nodes(state: &AppState) -> AppResult<Vec<ClientNode>> {
    Ok(node_repo::all(state.db()).await?.into_iter().map(Into::into).collect())
}

pub async fn kick(state: &AppState, app_id: &str, host_id: &str) -> AppResult<()> {
    let app = load_by_app_id(state, app_id).await?;
    if !node_repo::kick(state.db(), app.id, host_id).await? {
        return Err(AppError::NotFound(format!("node {host_id} of app {app_id} not found")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
    }

    #[test]
    fn app_ids_are_restricted() {
        assert!(check_app_id(Some("crm-prod_1.x".into())).is_ok());
        let e = check_app_id(Some("has space".into())).unwrap_err().to_string();
        assert!(e.starts_with("appId"), "{e}");
        assert!(check_strategy(Some("hash".into()), "RANDOM").unwrap() == "HASH");
        assert!(check_strategy(Some("LEAST".into()), "RANDOM").is_err());
    }
}
