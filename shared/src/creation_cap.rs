//! How many things of one kind a regular user may create. Each kind costs every tenant
//! something (a base an index on the shared chunks table, a skill a package in the bucket and a
//! row in everyone's list, an agent, an MCP server or a memory config rows in the market, the
//! pickers and everyone's lists), and
//! without a cap one account could create them at the rate limit's pace for as long as it
//! liked. Administrators are not counted.

use sqlx::PgConnection;

use crate::config::Config;
use crate::domain::CurrentUser;
use crate::{AppError, AppResult, AppState};

/// What a regular user creates under a cap of its own.
#[derive(Debug, Clone, Copy)]
pub enum Created {
    KnowledgeBase,
    Skill,
    Agent,
    McpServer,
    MemoryConfig,
}

impl Created {
    fn cap(self, config: &Config) -> i64 {
        match self {
            Self::KnowledgeBase => config.kb_max_per_user,
            Self::Skill => config.skill_max_per_user,
            Self::Agent => config.agent_max_per_user,
            Self::McpServer => config.mcp_max_per_user,
            Self::MemoryConfig => config.memory_config_max_per_user,
        }
    }

    /// The plural for the refusal, and the setting that raises the cap.
    fn words(self) -> (&'static str, &'static str) {
        match self {
            Self::KnowledgeBase => ("knowledge bases", "KB_MAX_PER_USER"),
            Self::Skill => ("skills", "SKILL_MAX_PER_USER"),
            Self::Agent => ("agents", "AGENT_MAX_PER_USER"),
            Self::McpServer => ("MCP servers", "MCP_MAX_PER_USER"),
            Self::MemoryConfig => ("memory configs", "MEMORY_CONFIG_MAX_PER_USER"),
        }
    }

    fn count_sql(self) -> &'static str {
        match self {
            Self::KnowledgeBase => "SELECT count(*) FROM knowledge_bases WHERE creator_id = $1",
            Self::Skill => "SELECT count(*) FROM skills WHERE creator_id = $1",
            Self::Agent => "SELECT count(*) FROM agents WHERE creator_id = $1",
            Self::McpServer => "SELECT count(*) FROM mcp_servers WHERE creator_id = $1",
            Self::MemoryConfig => "SELECT count(*) FROM memory_configs WHERE creator_id = $1",
        }
    }
}

/// Refuses `user`'s creation of one more `kind` past its cap. The count is taken under a lock
/// per user and kind that a transaction holds until it ends, so one user's concurrent
/// creations in transactions take turns. On a connection outside a transaction the lock ends
/// with its statement, and creations racing each other may pass the cap by a few.
pub async fn check(conn: &mut PgConnection, config: &Config, user: &CurrentUser, kind: Created) -> AppResult<()> {
    if user.is_admin() {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2::text))")
        .bind(kind.words().1)
        .bind(user.id)
        .execute(&mut *conn)
        .await?;
    let count: i64 = sqlx::query_scalar(kind.count_sql())
        .bind(user.id)
        .fetch_one(conn)
        .await?;
    let cap = kind.cap(config);
    if count >= cap {
        let (things, setting) = kind.words();
        return Err(AppError::validation(format!(
            "you have reached the limit of {cap} {things} ({setting}): delete one first"
        )));
    }
    Ok(())
}

/// `check` outside any transaction, on a pooled connection: before a paid model call or an
/// upload, so a refused user pays for neither. Creations racing each other may pass it; where
/// the creation has a transaction it counts again there.
pub async fn check_early(state: &AppState, user: &CurrentUser, kind: Created) -> AppResult<()> {
    check(&mut *state.db().acquire().await?, state.config(), user, kind).await
}
