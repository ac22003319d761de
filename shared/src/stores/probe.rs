//! Real connection tests per store type.

use std::time::Duration;

use sqlx::{ConnectOptions, Connection as _};

use super::{Connection, StoreType};
use crate::{AppError, AppResult, AppState};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Connects for real; the error names what failed.
pub async fn test(state: &AppState, t: StoreType, conn: &Connection) -> AppResult<()> {
    let fail = |what: String| AppError::business(format!("connection test failed: {what}"));
    match t {
        StoreType::PgVector | StoreType::PgFullText => {
            let mut pg = tokio::time::timeout(TIMEOUT, conn.pg_options().connect())
                .await
                .map_err(|_| fail(format!("no answer from {}:{} within 5 s", conn.host, conn.port)))?
                .map_err(|e| fail(e.to_string()))?;
            if t == StoreType::PgVector {
                let has_vector: bool =
                    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')")
                        .fetch_one(&mut pg)
                        .await
                        .map_err(|e| fail(e.to_string()))?;
                if !has_vector {
                    return Err(fail("the server has no pgvector extension".into()));
                }
            }
            let _ = pg.close().await;
            Ok(())
        }
        StoreType::Milvus => tokio::time::timeout(TIMEOUT * 2, crate::rag::backends::milvus::ping(conn))
            .await
            .map_err(|_| fail(format!("no answer from {}:{} within 10 s", conn.host, conn.port)))?
            .map_err(|e| fail(format!("Milvus: {e:#}"))),
        StoreType::OpenSearch => {
            let url = format!("{}://{}:{}/", scheme(conn), conn.host, conn.port);
            let mut req = state.models().http().get(&url);
            if let Some(u) = &conn.username {
                req = req.basic_auth(u, conn.password.as_deref());
            }
            let resp = req.timeout(TIMEOUT).send().await.map_err(|e| fail(e.to_string()))?;
            if !resp.status().is_success() {
                return Err(fail(format!("OpenSearch answered HTTP {}", resp.status())));
            }
            Ok(())
        }
    }
}

fn scheme(conn: &Connection) -> &'static str {
    if conn.use_tls {
        "https"
    } else {
        "http"
    }
}
