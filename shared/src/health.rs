//! Whether the parts the service stands on answer: the database, the object store and the
//! queue, each asked for real.

use crate::AppState;

/// Each part's failure, if it failed; the reasons name hosts and users.
pub struct Health {
    pub db: Result<(), String>,
    pub storage: Result<(), String>,
    pub queue: Result<(), String>,
}

impl Health {
    pub fn is_ok(&self) -> bool {
        self.db.is_ok() && self.storage.is_ok() && self.queue.is_ok()
    }
}

/// Asks the three parts at once.
pub async fn check(state: &AppState) -> Health {
    let db = async {
        sqlx::query("SELECT 1")
            .execute(state.db())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let storage = async { state.storage().check().await.map_err(|e| e.to_string()) };
    let queue = async { state.queue().check().await.map_err(|e| format!("{e:#}")) };
    let (db, storage, queue) = tokio::join!(db, storage, queue);
    Health { db, storage, queue }
}
