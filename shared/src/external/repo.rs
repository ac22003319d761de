//! SQL of the external API: external users, their subscriptions, uploads and conversations.

use sqlx::{PgExecutor, PgPool};

use super::model::{ExternalAgentRow, ExternalUserRow};

const USER_COLUMNS: &str = "id, open_id, nickname, avatar, extra, create_dt, update_dt";

pub struct UserData<'a> {
    pub app: i64,
    pub open_id: &'a str,
    pub nickname: Option<&'a str>,
    pub avatar: Option<&'a str>,
    pub extra: Option<&'a serde_json::Value>,
}

#[derive(sqlx::FromRow)]
struct Upserted {
    #[sqlx(flatten)]
    user: ExternalUserRow,
    created: bool,
}

/// Creates the user or updates the fields that were sent; `true` when created.
pub async fn upsert_user(db: &PgPool, u: &UserData<'_>) -> sqlx::Result<(ExternalUserRow, bool)> {
    let row: Upserted = sqlx::query_as(&format!(
        "INSERT INTO external_users (app_id, open_id, nickname, avatar, extra)
         VALUES ($1, $2, COALESCE($3, ''), COALESCE($4, ''), COALESCE($5, '{{}}'::jsonb))
         ON CONFLICT (app_id, open_id) DO UPDATE SET nickname = COALESCE($3, external_users.nickname),
           avatar = COALESCE($4, external_users.avatar), extra = COALESCE($5, external_users.extra), update_dt = now()
         RETURNING {USER_COLUMNS}, (xmax = 0) AS created"
    ))
    .bind(u.app)
    .bind(u.open_id)
    .bind(u.nickname)
    .bind(u.avatar)
    .bind(u.extra)
    .fetch_one(db)
    .await?;
    Ok((row.user, row.created))
}

/// The user's id, creating a bare user on first contact; `true` when created.
///
/// A known user is only read: an upsert would write a row version and lock the row on every
/// chat of that user, and a partner's busy user would queue its own chats on that lock.
pub async fn ensure_user(db: &PgPool, app: i64, open_id: &str) -> sqlx::Result<(i64, bool)> {
    // A first contact running at once may create the user after this statement's snapshot
    // (the insert finds it, the read does not see it), and a refused first chat may remove it
    // again before it is read: each is looked at once more, as a new try.
    for _ in 0..crate::db::ENSURE_TRIES {
        let found: Option<(i64, bool)> = sqlx::query_as(
            "WITH known AS (SELECT id FROM external_users WHERE app_id = $1 AND open_id = $2),
                  added AS (INSERT INTO external_users (app_id, open_id)
                            SELECT $1, $2 WHERE NOT EXISTS (SELECT 1 FROM known)
                            ON CONFLICT (app_id, open_id) DO NOTHING RETURNING id)
             SELECT id, false FROM known UNION ALL SELECT id, true FROM added",
        )
        .bind(app)
        .bind(open_id)
        .fetch_optional(db)
        .await?;
        if let Some(found) = found {
            return Ok(found);
        }
    }
    Err(sqlx::Error::RowNotFound)
}

/// Removes a user again (a first chat that was refused leaves nothing behind), unless another
/// request of the same new user stored something meanwhile: its conversation, subscription,
/// image or memory would go with the user, as would a registration's nickname, avatar and extra
/// (a registration writes the row again, so it is no longer as first created).
pub async fn delete_user(db: &PgPool, id: i64) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
    // What another request is storing for the user holds the user's row (its foreign key):
    // waited for here, so the checks below, a statement of their own, see it.
    sqlx::query("SELECT 1 FROM external_users WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM external_users u WHERE u.id = $1 AND u.update_dt = u.create_dt
           AND NOT EXISTS (SELECT 1 FROM conversations WHERE external_user_id = u.id)
           AND NOT EXISTS (SELECT 1 FROM external_subscriptions WHERE external_user_id = u.id)
           AND NOT EXISTS (SELECT 1 FROM external_resources WHERE external_user_id = u.id)
           AND NOT EXISTS (SELECT 1 FROM memories WHERE external_user_id = u.id)",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

pub async fn find_user(db: &PgPool, app: i64, open_id: &str) -> sqlx::Result<Option<ExternalUserRow>> {
    sqlx::query_as(&format!(
        "SELECT {USER_COLUMNS} FROM external_users WHERE app_id = $1 AND open_id = $2"
    ))
    .bind(app)
    .bind(open_id)
    .fetch_optional(db)
    .await
}

/// Agents an app may use: enabled ones that run on this app or on none.
const AGENTS: &str = "SELECT a.id, a.name, a.description, a.avatar, a.greeting, a.preset_questions,
       a.view_count, a.is_featured, a.app_id, a.create_dt,
       EXISTS (SELECT 1 FROM external_subscriptions s WHERE s.agent_id = a.id AND s.external_user_id = $2) AS subscribed
     FROM agents a
     WHERE a.status = 1 AND (a.app_id IS NULL OR a.app_id = $1)";

/// Agents a partner's list holds at most: it is not paged, every user's agents may be in it,
/// and each carries its greeting and preset questions (up to about 22 KB): unbounded, a few
/// hundred long agents of one user's took every partner's list past Lambda's 6 MB answer.
pub const AGENTS_MAX: i64 = 200;

/// The first `AGENTS_MAX`: the app's own agents first (the platform's popular ones took all
/// the places, and the app's rarely viewed agents were missing), then featured, then the most
/// viewed. `viewer` is the external user whose subscriptions are shown (none: 0).
pub async fn agents(db: &PgPool, app_id: &str, viewer: i64) -> sqlx::Result<Vec<ExternalAgentRow>> {
    sqlx::query_as(&format!(
        "{AGENTS} ORDER BY a.app_id IS NOT NULL DESC, a.is_featured DESC, a.view_count DESC, a.id DESC LIMIT $3"
    ))
    .bind(app_id)
    .bind(viewer)
    .bind(AGENTS_MAX)
    .fetch_all(db)
    .await
}

pub async fn agent(db: &PgPool, app_id: &str, viewer: i64, id: i64) -> sqlx::Result<Option<ExternalAgentRow>> {
    sqlx::query_as(&format!("{AGENTS} AND a.id = $3"))
        .bind(app_id)
        .bind(viewer)
        .bind(id)
        .fetch_optional(db)
        .await
}

pub async fn subscribed_agents(db: &PgPool, app_id: &str, viewer: i64) -> sqlx::Result<Vec<ExternalAgentRow>> {
    sqlx::query_as(&format!(
        "{AGENTS} AND EXISTS (SELECT 1 FROM external_subscriptions s WHERE s.agent_id = a.id AND s.external_user_id = $2)
         ORDER BY a.name, a.id LIMIT $3"
    ))
    .bind(app_id)
    .bind(viewer)
    .bind(AGENTS_MAX)
    .fetch_all(db)
    .await
}

pub async fn subscribe(db: impl PgExecutor<'_>, agent_id: i64, user: i64) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO external_subscriptions (agent_id, external_user_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(agent_id)
    .bind(user)
    .execute(db)
    .await?;
    Ok(())
}

pub async fn unsubscribe(db: impl PgExecutor<'_>, agent_id: i64, user: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM external_subscriptions WHERE agent_id = $1 AND external_user_id = $2")
        .bind(agent_id)
        .bind(user)
        .execute(db)
        .await?;
    Ok(())
}

pub async fn own_resource(db: impl PgExecutor<'_>, resource_id: i64, user: i64) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO external_resources (resource_id, external_user_id) VALUES ($1, $2)")
        .bind(resource_id)
        .bind(user)
        .execute(db)
        .await?;
    Ok(())
}

/// Whether the user has a conversation with the agent.
pub async fn has_conversations(db: &PgPool, agent_id: i64, user: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM conversations WHERE agent_id = $1 AND external_user_id = $2)")
        .bind(agent_id)
        .bind(user)
        .fetch_one(db)
        .await
}

/// Deletes every conversation of the user with the agent; returns how many.
pub async fn delete_conversations(db: &PgPool, agent_id: i64, user: i64) -> sqlx::Result<u64> {
    let done = sqlx::query("DELETE FROM conversations WHERE agent_id = $1 AND external_user_id = $2")
        .bind(agent_id)
        .bind(user)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}
