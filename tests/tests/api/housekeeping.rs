//! The daily clean-up removes what has expired, and only that: upload previews with their
//! files, refresh tokens of logins that are wholly expired, stale login counters, nodes long
//! offline, uncollected kicks and answers whose turn ended without storing them. (Memory
//! expiry has its own test in `memory`.)

use api_tests::{KbSetup, Store};
use serde_json::json;

async fn strings(db: &sqlx::PgPool, sql: &str) -> Vec<String> {
    sqlx::query_scalar(sql).fetch_all(db).await.unwrap()
}

async fn run(db: &sqlx::PgPool, sql: &str) {
    sqlx::query(sql).execute(db).await.unwrap();
}

/// Puts a directory where the stored file `key` was: the file system refuses to delete it as a
/// file, as a store that is briefly unreachable would. Returns its path.
fn undeletable(app: &api_tests::TestApp, key: &str) -> std::path::PathBuf {
    let path = app.storage_dir.path().join(key);
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir_all(path.join("inside")).unwrap();
    path
}

/// Before a noted file is deleted, every table that keeps storage keys is asked whether a row
/// names it: each must answer from an index, not by reading the whole table once per file.
#[tokio::test]
async fn every_table_that_names_files_finds_a_key_by_index() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let mut conn = app.db.acquire().await.unwrap();
    // Tables this small are read whole when that is cheaper: only whether an index can answer
    // is asked here.
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    for table in ["resources", "skills", "documents", "document_images"] {
        let plan: Vec<String> = sqlx::query_scalar(&format!(
            "EXPLAIN SELECT 1 FROM {table} WHERE storage_key = 'rag/1/x.png'"
        ))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains("Index") && !plan.contains("Seq Scan"), "{table}: {plan}");
    }
}

#[tokio::test]
async fn housekeeping_removes_only_what_has_expired() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, db) = (&s.app, &s.app.db);

    // Two previews, one of them past its hour.
    let kb = s.kb("Housekeeping KB", json!({})).await;
    let old = s.preview(kb, &[("old.txt", b"old".to_vec())], None).await;
    let old = old.assert_ok()["previewToken"].as_str().unwrap().to_owned();
    let live = s.preview(kb, &[("live.txt", b"live".to_vec())], None).await;
    let live = live.assert_ok()["previewToken"].as_str().unwrap().to_owned();
    let key_of = |name: &'static str| async move {
        sqlx::query_scalar::<_, String>("SELECT storage_key FROM resources WHERE original_name = $1")
            .bind(name)
            .fetch_one(db)
            .await
            .unwrap()
    };
    let (old_key, live_key) = (key_of("old.txt").await, key_of("live.txt").await);
    // A preview whose request ended before the preview was saved: its file, two days old, is
    // named by no preview.
    let unsaved = s.preview(kb, &[("unsaved.txt", b"unsaved".to_vec())], None).await;
    let unsaved = unsaved.assert_ok()["previewToken"].as_str().unwrap().to_owned();
    let unsaved_key = key_of("unsaved.txt").await;
    sqlx::query("DELETE FROM upload_previews WHERE token = $1")
        .bind(&unsaved)
        .execute(db)
        .await
        .unwrap();
    run(
        db,
        "UPDATE resources SET create_dt = now() - interval '2 days' WHERE original_name = 'unsaved.txt'",
    )
    .await;
    sqlx::query("UPDATE upload_previews SET expires_at = now() - interval '1 minute' WHERE token = $1")
        .bind(&old)
        .execute(db)
        .await
        .unwrap();

    // Refresh tokens: the admin's login (live), a login wholly expired, and a login with an
    // expired used token and a live one.
    let admin_id: i64 = sqlx::query_scalar("SELECT id FROM users WHERE username = 'admin'")
        .fetch_one(db)
        .await
        .unwrap();
    for (family, hash, expires) in [
        (
            "00000000-0000-0000-0000-00000000dead",
            "dead-1",
            "now() - interval '20 days'",
        ),
        (
            "00000000-0000-0000-0000-00000000dead",
            "dead-2",
            "now() - interval '1 day'",
        ),
        (
            "00000000-0000-0000-0000-0000000a11fe",
            "alive-old",
            "now() - interval '1 day'",
        ),
        (
            "00000000-0000-0000-0000-0000000a11fe",
            "alive-new",
            "now() + interval '1 day'",
        ),
    ] {
        sqlx::query(&format!(
            "INSERT INTO refresh_tokens (family_id, user_id, token_hash, expires_at) VALUES ($1::uuid, $2, $3, {expires})"
        ))
        .bind(family)
        .bind(admin_id)
        .bind(hash)
        .execute(db)
        .await
        .unwrap();
    }
    let tokens_before = app.count("refresh_tokens").await;

    // Login counters: stale, locked now, and counting in the current window.
    run(
        db,
        "INSERT INTO login_throttle (key, failures, window_start, locked_until) VALUES
           ('u:stale', 3, now() - interval '1 hour', NULL),
           ('u:lock-over', 0, now() - interval '20 minutes', now() - interval '5 minutes'),
           ('u:locked', 0, now() - interval '1 minute', now() + interval '14 minutes'),
           ('u:counting', 2, now() - interval '1 minute', NULL)",
    )
    .await;

    // Nodes: online, offline for a day (still listed), offline for eight days (gone); kicks
    // of a day and of eight days.
    let crm = app.create_app(&s.admin, "crm").await;
    for host in ["online", "offline-1d", "offline-8d"] {
        app.heartbeat(&crm, host).await.assert_ok();
    }
    run(
        db,
        "UPDATE client_nodes SET expire_dt = now() - interval '1 day' WHERE host_id = 'offline-1d'",
    )
    .await;
    run(
        db,
        "UPDATE client_nodes SET expire_dt = now() - interval '8 days' WHERE host_id = 'offline-8d'",
    )
    .await;
    run(
        db,
        "INSERT INTO client_node_kicks (app_id, host_id, kicked_dt)
         SELECT id, k.host, k.at FROM apps, (VALUES ('kicked-1d', now() - interval '1 day'),
                                                    ('kicked-8d', now() - interval '8 days')) AS k(host, at)",
    )
    .await;

    // Answers still generating: one whose turn began two days ago (its process ended), one
    // of a turn under way.
    let agent: i64 = sqlx::query_scalar("INSERT INTO agents (name, creator_id) VALUES ('helper', $1) RETURNING id")
        .bind(admin_id)
        .fetch_one(db)
        .await
        .unwrap();
    let conversation: i64 = sqlx::query_scalar(
        "INSERT INTO conversations (conversation_key, agent_id, user_id) VALUES ('c', $1, $2) RETURNING id",
    )
    .bind(agent)
    .bind(admin_id)
    .fetch_one(db)
    .await
    .unwrap();
    for (content, at) in [("stuck", "now() - interval '2 days'"), ("live", "now()")] {
        sqlx::query(&format!(
            "INSERT INTO messages (conversation_id, agent_id, role, status, content, create_dt)
             VALUES ($1, $2, 'assistant', 0, $3, {at})"
        ))
        .bind(conversation)
        .bind(agent)
        .bind(content)
        .execute(db)
        .await
        .unwrap();
    }

    // Documents in processing: one whose lease ran out a day ago (its worker was killed), one
    // being processed now; and three no worker holds: one queued a day ago and one let go a
    // day ago after a passing failure (their messages wait in the queue, behind a backlog),
    // and one queued longer ago than the queue keeps a message.
    for (name, status, lease, changed) in [
        ("stalled.txt", "parsing", "now() - interval '1 day'", "now()"),
        ("busy.txt", "parsing", "now() + interval '1 minute'", "now()"),
        ("queued.txt", "pending", "NULL", "now() - interval '1 day'"),
        ("retrying.txt", "embedding", "NULL", "now() - interval '1 day'"),
        ("lost.txt", "pending", "NULL", "now() - interval '16 days'"),
    ] {
        sqlx::query(&format!(
            "INSERT INTO documents (rag_id, name, file_type, source_path, storage_key, mime_type, file_size,
               content_hash, status, lease_until, updated_at, creator_id)
             VALUES ($1, $2, 'txt', $2, 'k/' || $2, 'text/plain', 1, 'h', '{status}', {lease}, {changed}, $3)"
        ))
        .bind(kb)
        .bind(name)
        .bind(admin_id)
        .execute(db)
        .await
        .unwrap();
    }

    // Two presigned uploads nobody registered: one staged two days ago, one just now.
    for key in ["resources/1/abandoned.bin", "resources/1/in-flight.bin"] {
        let body = futures::stream::iter([Ok(bytes::Bytes::from_static(b"up"))]);
        app.state
            .storage()
            .put_stream(key, Box::pin(body), 10, "x")
            .await
            .unwrap();
    }
    let mark = app.storage_dir.path().join(".staged/resources/1/abandoned.bin");
    let two_days = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 86400);
    std::fs::File::options()
        .write(true)
        .open(mark)
        .unwrap()
        .set_modified(two_days)
        .unwrap();

    // Objects whose delete failed when their rows went: one still stored, one gone meanwhile.
    app.state
        .storage()
        .put("skills/left.zip", bytes::Bytes::from_static(b"zip"), "application/zip")
        .await
        .unwrap();
    run(
        db,
        "INSERT INTO leftover_objects (storage_key) VALUES ('skills/left.zip'), ('skills/gone.zip')",
    )
    .await;

    // The vector index of a base deleted while its drop failed.
    run(
        db,
        "CREATE INDEX chunks_hnsw_kb_987654 ON chunks (id) WHERE rag_id = 987654",
    )
    .await;

    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(
        swept,
        shared::housekeeping::Swept {
            upload_previews: 1,
            unsaved_preview_files: 1,
            staged_uploads: 1,
            refresh_tokens: 2,
            login_counters: 2,
            client_nodes: 1,
            node_kicks: 1,
            archived_memories: 0,
            abandoned_answers: 1,
            stalled_documents: 2,
            leftover_objects: 3,
            orphan_indexes: 1,
        }
    );
    assert_eq!(
        strings(
            db,
            "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'chunks_hnsw_kb_%' ORDER BY 1"
        )
        .await,
        [format!("chunks_hnsw_kb_{kb}")],
        "the live base's index stays"
    );
    assert!(app.state.storage().head("skills/left.zip").await.unwrap().is_none());
    let storage = app.state.storage();
    assert!(storage.head("resources/1/abandoned.bin").await.unwrap().is_none());
    assert_eq!(storage.head("resources/1/in-flight.bin").await.unwrap(), Some(2));
    assert_eq!(app.count("leftover_objects").await, 0);
    assert_eq!(
        strings(
            db,
            "SELECT name || ':' || status || ':' || coalesce(error_stage, '') FROM documents ORDER BY name"
        )
        .await,
        [
            "busy.txt:parsing:",
            "lost.txt:failed:pending",
            "queued.txt:pending:",
            "retrying.txt:embedding:",
            "stalled.txt:failed:parsing"
        ]
    );
    assert_eq!(
        strings(db, "SELECT content || ':' || status FROM messages ORDER BY id").await,
        ["stuck:2", "live:0"]
    );

    assert_eq!(
        strings(db, "SELECT token FROM upload_previews").await,
        std::slice::from_ref(&live)
    );
    assert_eq!(strings(db, "SELECT original_name FROM resources").await, ["live.txt"]);
    let storage = app.state.storage();
    assert_eq!(
        storage.head(&old_key).await.unwrap(),
        None,
        "the expired preview's file is gone"
    );
    assert_eq!(storage.head(&live_key).await.unwrap(), Some(4));
    assert_eq!(
        storage.head(&unsaved_key).await.unwrap(),
        None,
        "the unsaved preview's file is gone"
    );
    assert_eq!(app.count("refresh_tokens").await, tokens_before - 2);
    assert_eq!(
        strings(
            db,
            "SELECT token_hash FROM refresh_tokens WHERE token_hash LIKE 'dead-%'"
        )
        .await,
        Vec::<String>::new()
    );
    assert_eq!(
        strings(
            db,
            "SELECT token_hash FROM refresh_tokens WHERE token_hash LIKE 'alive-%' ORDER BY 1"
        )
        .await,
        ["alive-new", "alive-old"]
    );
    assert_eq!(
        strings(db, "SELECT key FROM login_throttle ORDER BY key").await,
        ["u:counting", "u:locked"]
    );
    assert_eq!(
        strings(db, "SELECT host_id FROM client_nodes ORDER BY host_id").await,
        ["offline-1d", "online"]
    );
    assert_eq!(
        strings(db, "SELECT host_id FROM client_node_kicks").await,
        ["kicked-1d"]
    );

    // The live preview still commits; a second run finds nothing.
    let items = json!([{ "tempResourceId": sqlx::query_scalar::<_, i64>("SELECT id FROM resources").fetch_one(db).await.unwrap(), "decision": "NEW" }]);
    app.post(
        "/document/upload/commit",
        Some(&s.admin),
        &json!({ "previewToken": live, "items": items }),
    )
    .await
    .assert_ok();
    let again = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(again, shared::housekeeping::Swept::default());
    shared::housekeeping::job(app.state.clone()).await.unwrap();
}

/// A preview whose file cannot be deleted stays, with that file's resource row (its other
/// files go), and the next run finishes it: deleting the preview first left files that no row named any more. A
/// cancelled preview cannot be committed even while its files wait for that run.
#[tokio::test]
async fn previews_whose_files_cannot_be_deleted_yet_are_finished_by_a_later_run() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, db) = (&s.app, &s.app.db);
    let t = Some(s.admin.as_str());
    let kb = s.kb("Stubborn files", json!({})).await;
    let token = |r: &api_tests::Reply| r.body["data"]["previewToken"].as_str().unwrap().to_owned();
    let expiring = token(
        &s.preview(kb, &[("a.txt", b"a".to_vec()), ("b.txt", b"b".to_vec())], None)
            .await,
    );
    let cancelled = s.preview(kb, &[("c.txt", b"c".to_vec())], None).await;
    let cancelled_item = cancelled.body["data"]["items"][0]["tempResourceId"].clone();
    let cancelled = token(&cancelled);
    run(
        db,
        "UPDATE upload_previews SET expires_at = now() - interval '1 minute'",
    )
    .await;
    let block = |name: &'static str| async move {
        let key: String = sqlx::query_scalar("SELECT storage_key FROM resources WHERE original_name = $1")
            .bind(name)
            .fetch_one(db)
            .await
            .unwrap();
        undeletable(app, &key)
    };
    let blocked = [block("a.txt").await, block("c.txt").await];
    sqlx::query("UPDATE upload_previews SET expires_at = now() + interval '1 hour' WHERE token = $1")
        .bind(&cancelled)
        .execute(db)
        .await
        .unwrap();
    app.delete(&format!("/document/upload/preview/{cancelled}"), t)
        .await
        .assert_ok();
    let commit =
        json!({ "previewToken": cancelled, "items": [{ "tempResourceId": cancelled_item, "decision": "NEW" }] });
    app.post("/document/upload/commit", t, &commit)
        .await
        .assert_error(404, 404, "previewToken");

    assert!(
        shared::housekeeping::run(&app.state).await.is_err(),
        "the job reports the failure"
    );
    let mut left = strings(db, "SELECT token FROM upload_previews ORDER BY token").await;
    let mut both = vec![expiring.clone(), cancelled.clone()];
    left.sort();
    both.sort();
    assert_eq!(left, both, "both previews wait for their files");
    // The files go side by side: b.txt went with its row, the two that could not go keep theirs.
    assert_eq!(
        strings(db, "SELECT original_name FROM resources ORDER BY original_name").await,
        ["a.txt", "c.txt"],
        "every file left keeps its row, and only those"
    );

    for path in &blocked {
        std::fs::remove_dir_all(path).unwrap();
    }
    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(swept.upload_previews, 2);
    assert_eq!(swept.leftover_objects, 0);
    assert_eq!(app.count("upload_previews").await, 0);
    assert_eq!(app.count("resources").await, 0);
    assert_eq!(app.count("documents").await, 0);
}

/// A file whose row is gone but whose delete failed is noted and deleted by the next
/// housekeeping run, not left in storage for good.
#[tokio::test]
async fn a_file_whose_delete_failed_is_deleted_by_the_housekeeping() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, db) = (&s.app, &s.app.db);
    let t = Some(s.admin.as_str());
    let skill = app
        .post("/skill", t, &json!({ "name": "short-lived", "description": "d" }))
        .await
        .assert_status_ok()["id"]
        .as_i64()
        .unwrap();
    let key: String = sqlx::query_scalar("SELECT storage_key FROM skills WHERE id = $1")
        .bind(skill)
        .fetch_one(db)
        .await
        .unwrap();
    let path = undeletable(app, &key);
    app.delete(&format!("/skill/{skill}"), t).await.assert_status_ok();
    assert_eq!(
        strings(db, "SELECT storage_key FROM leftover_objects").await,
        [key.as_str()]
    );
    assert!(
        shared::housekeeping::run(&app.state).await.is_err(),
        "still refused: reported"
    );
    assert_eq!(app.count("leftover_objects").await, 1, "and kept for the next run");

    std::fs::remove_dir_all(&path).unwrap();
    std::fs::write(&path, b"zip").unwrap();
    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(swept.leftover_objects, 1);
    assert!(!path.exists(), "the package file is gone");
    assert_eq!(app.count("leftover_objects").await, 0);
}

/// An object is noted before it is written and the statement storing its row takes the note
/// back: uploads leave no note, and an object whose request ended before its row (a Lambda
/// timeout) is deleted by the housekeeping once its note is due, and not before (its row may
/// still be on its way).
#[tokio::test]
async fn an_object_whose_row_never_came_is_deleted_once_due() {
    let s = KbSetup::new(Store::Filesystem, &[]).await;
    let (app, db) = (&s.app, &s.app.db);
    let t = Some(s.admin.as_str());
    app.post("/skill", t, &json!({ "name": "kept", "description": "d" }))
        .await
        .assert_status_ok();
    app.upload_resource(&s.admin, "a.txt", b"kept".to_vec(), None)
        .await
        .assert_ok();
    let kb = s.kb("kept", json!({})).await;
    s.upload(kb, &[("a.md", b"# A\nalpha".to_vec())]).await.assert_ok();
    assert_eq!(app.count("leftover_objects").await, 0, "every row took its note back");
    // A due note whose key a row names after all (a retried completion noted it after the
    // first one's row took its own back) is dropped, and the file stays.
    let named: String = sqlx::query_scalar("SELECT storage_key FROM resources LIMIT 1")
        .fetch_one(db)
        .await
        .unwrap();
    sqlx::query("INSERT INTO leftover_objects (storage_key) VALUES ($1)")
        .bind(&named)
        .execute(db)
        .await
        .unwrap();
    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(swept.leftover_objects, 0);
    assert_eq!(app.count("leftover_objects").await, 0);
    assert!(app.state.storage().head(&named).await.unwrap().is_some());

    let key = "resources/1/00000000-0000-4000-8000-000000000000.txt";
    let orphan = bytes::Bytes::from_static(b"orphan");
    shared::resources::leftovers::put_ahead(&app.state, key, orphan, "text/plain")
        .await
        .unwrap();
    let stored = || async { app.state.storage().head(key).await.unwrap().is_some() };
    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(swept.leftover_objects, 0);
    assert!(stored().await, "not due yet");
    run(db, "UPDATE leftover_objects SET due_at = now() - interval '1 minute'").await;
    let swept = shared::housekeeping::run(&app.state).await.unwrap();
    assert_eq!(swept.leftover_objects, 1);
    assert!(!stored().await, "deleted once due");
    assert_eq!(app.count("leftover_objects").await, 0);

    // Many at once (a deleted base's files) go in batches until none is due, not one batch a
    // run: a batch a day took weeks, in front of every file whose delete failed later.
    let keys: Vec<String> = (0..5)
        .map(|i| format!("resources/1/00000000-0000-4000-8000-00000000000{i}.txt"))
        .collect();
    for key in &keys {
        let orphan = bytes::Bytes::from_static(b"orphan");
        shared::resources::leftovers::put_ahead(&app.state, key, orphan, "text/plain")
            .await
            .unwrap();
    }
    run(db, "UPDATE leftover_objects SET due_at = now() - interval '1 minute'").await;
    let budget = std::time::Duration::from_secs(60);
    let went = shared::resources::leftovers::retry_in(&app.state, 2, budget)
        .await
        .unwrap();
    assert_eq!((went, app.count("leftover_objects").await), (5, 0));
    for key in &keys {
        assert!(app.state.storage().head(key).await.unwrap().is_none(), "{key}");
    }
}
