//! What a refused request must leave untouched: every table's rows and every stored object,
//! captured whole so a test can compare before and after.

use std::collections::BTreeMap;
use std::path::Path;

use crate::TestApp;

/// Every table's content hash and every stored file with its size.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub tables: BTreeMap<String, String>,
    pub files: BTreeMap<String, u64>,
}

/// Tables that legitimately change on any request: login bookkeeping, the request counters of
/// the rate limiter and the migration log.
const VOLATILE: &[&str] = &[
    "_sqlx_migrations",
    "login_known_addresses",
    "login_throttle",
    "rate_limit_windows",
    "refresh_tokens",
];

impl TestApp {
    /// The database and the filesystem store as they are now.
    pub async fn snapshot(&self) -> Snapshot {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1",
        )
        .fetch_all(&self.db)
        .await
        .expect("tables");
        let mut tables = BTreeMap::new();
        for name in names.into_iter().filter(|n| !VOLATILE.contains(&n.as_str())) {
            let sql = format!("SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM \"{name}\" t");
            let hash: String = sqlx::query_scalar(&sql).fetch_one(&self.db).await.expect("table hash");
            tables.insert(name, hash);
        }
        let mut files = BTreeMap::new();
        list_files(self.storage_dir.path(), self.storage_dir.path(), &mut files);
        Snapshot { tables, files }
    }
}

fn list_files(root: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out);
        } else if let Ok(meta) = entry.metadata() {
            let key = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            out.insert(key, meta.len());
        }
    }
}

impl Snapshot {
    /// Panics naming the tables and files that differ from `before`.
    #[track_caller]
    pub fn assert_unchanged_since(&self, before: &Snapshot, what: &str) {
        let tables: Vec<&String> = self
            .tables
            .iter()
            .filter(|(k, v)| before.tables.get(*k) != Some(v))
            .map(|(k, _)| k)
            .collect();
        assert!(tables.is_empty(), "{what} changed tables {tables:?}");
        assert_eq!(self.files, before.files, "{what} changed stored files");
    }
}
