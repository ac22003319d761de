//! `/skill`: packages in object storage (filesystem and S3), file editing with optimistic
//! concurrency, zip safety, AI drafts. Every refusal checks that the database rows and the
//! stored objects are exactly as before.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read, Write};

use api_tests::model_server::ModelServer;
use api_tests::{s3_client, spawn_with, with_token, Reply, Store, TestApp};
use serde_json::{json, Value};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

const SKILL_MD: &str = "---\nname: pdf-forms\ndescription: Fill in PDF forms from a spreadsheet\nlicense: MIT\n---\n\n# Steps\n\n1. Read the sheet.\n";
const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff, 0xfe];

struct Setup {
    app: TestApp,
    bucket: Option<String>,
    admin: String,
}

type Rows = Vec<(i64, String, String, String, i64, String, i64)>;

/// The app on `store` (S3: a bucket of its own, so the objects listed are this test's only),
/// with small limits so refusals are cheap to provoke.
async fn setup(store: Store) -> Setup {
    let bucket = match store {
        Store::S3 => Some(api_tests::own_bucket("skills").await),
        Store::Filesystem => None,
    };
    let mut extra = vec![
        ("SKILL_MAX_PACKAGE_BYTES", "65536"),
        ("SKILL_MAX_ENTRIES", "10"),
        ("SKILL_MAX_UNPACKED_BYTES", "524288"),
        ("SKILL_MAX_FILE_BYTES", "16384"),
    ];
    if let Some(b) = &bucket {
        extra.push(("S3_BUCKET", b.as_str()));
    }
    let app = spawn_with(store, &extra).await;
    let admin = app.admin_token().await;
    Setup { app, bucket, admin }
}

impl Setup {
    fn t(&self) -> Option<&str> {
        Some(&self.admin)
    }

    /// Every stored object key (or file path under the storage directory).
    async fn objects(&self) -> BTreeSet<String> {
        match &self.bucket {
            Some(b) => {
                let out = s3_client()
                    .await
                    .list_objects_v2()
                    .bucket(b)
                    .send()
                    .await
                    .expect("list");
                out.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned))
                    .collect()
            }
            None => {
                let root = self.app.storage_dir.path().to_path_buf();
                let mut found = BTreeSet::new();
                let mut dirs = vec![root.clone()];
                while let Some(dir) = dirs.pop() {
                    for entry in std::fs::read_dir(&dir).expect("read dir") {
                        let p = entry.expect("entry").path();
                        if p.is_dir() {
                            dirs.push(p);
                        } else {
                            found.insert(p.strip_prefix(&root).unwrap().display().to_string());
                        }
                    }
                }
                found
            }
        }
    }

    async fn rows(&self) -> Rows {
        sqlx::query_as(
            "SELECT id, name, description, file_name, file_size, storage_key, version FROM skills ORDER BY id",
        )
        .fetch_all(&self.app.db)
        .await
        .expect("rows")
    }

    async fn snapshot(&self) -> (Rows, BTreeSet<String>) {
        (self.rows().await, self.objects().await)
    }

    async fn upload_as(&self, token: &str, file_name: &str, bytes: Vec<u8>) -> Reply {
        self.upload_to("/skill/upload", token, file_name, bytes).await
    }

    async fn upload_to(&self, path: &str, token: &str, file_name: &str, bytes: Vec<u8>) -> Reply {
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name(file_name.to_owned()),
        );
        let req = self.app.client.post(self.app.url(path)).multipart(form);
        self.app.send(with_token(req, Some(token))).await
    }

    async fn upload(&self, bytes: Vec<u8>) -> Reply {
        self.upload_as(&self.admin, "pdf-forms.zip", bytes).await
    }

    async fn create(&self, name: &str) -> i64 {
        let r = self
            .app
            .post("/skill", self.t(), &json!({ "name": name, "description": "d" }))
            .await;
        r.assert_status_ok()["id"].as_i64().expect("id")
    }

    async fn read(&self, id: i64, path: &str) -> Reply {
        let url = format!("/skill/{id}/files/content?path={}", urlencode(path));
        self.app.get(&url, self.t()).await
    }

    async fn write(&self, token: &str, id: i64, path: &str, body: Value) -> Reply {
        let url = format!("/skill/{id}/files/content?path={}", urlencode(path));
        self.app.put(&url, Some(token), &body).await
    }

    async fn download(&self, id: i64) -> BTreeMap<String, Vec<u8>> {
        let r = self.app.get(&format!("/skill/{id}/download"), self.t()).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(r.headers["content-type"], "application/zip");
        unzip(&r.bytes)
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    for (name, data) in entries {
        w.start_file(*name, o).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Files (not directories) of a zip, by path.
fn unzip(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = ZipArchive::new(Cursor::new(bytes)).expect("a valid zip");
    let mut files = BTreeMap::new();
    for i in 0..archive.len() {
        let mut f = archive.by_index(i).unwrap();
        if f.is_dir() {
            continue;
        }
        let mut data = Vec::new();
        f.read_to_end(&mut data).unwrap();
        files.insert(f.name().unwrap().into_owned(), data);
    }
    files
}

fn package() -> Vec<u8> {
    zip_of(&[
        ("pdf-forms/SKILL.md", SKILL_MD.as_bytes()),
        ("pdf-forms/scripts/fill.py", b"print('fill')\n"),
        ("pdf-forms/assets/logo.png", PNG),
    ])
}

async fn lifecycle(store: Store) {
    let s = setup(store).await;
    let app = &s.app;
    let id = s.create("release-notes").await;
    let detail = app.get(&format!("/skill/{id}"), s.t()).await;
    let d = detail.assert_status_ok().clone();
    assert_eq!(
        (d["name"].as_str(), d["description"].as_str(), d["fileName"].as_str()),
        (Some("release-notes"), Some("d"), Some(""))
    );
    assert_eq!(d["version"], 1);
    let dt = d["createDt"].as_str().unwrap();
    assert!(dt.len() == 19 && dt.as_bytes()[10] == b'T', "{dt}");
    assert!(d["fileSize"].as_i64().unwrap() > 0);
    let starter = s.read(id, "SKILL.md").await;
    let starter = starter.assert_status_ok()["content"].as_str().unwrap().to_owned();
    assert!(
        starter.starts_with("---\nname: release-notes\ndescription: d\n---\n"),
        "{starter}"
    );

    // A name with the client's path (an old browser's) keeps the file's own name only.
    let uploaded = s.upload_as(&s.admin, "C:\\Users\\me\\pdf-forms.zip", package()).await;
    let u = uploaded.assert_status_ok().clone();
    let up = u["id"].as_i64().unwrap();
    assert_eq!(
        (u["name"].as_str(), u["fileName"].as_str()),
        (Some("pdf-forms"), Some("pdf-forms.zip"))
    );
    assert_eq!(u["description"], "Fill in PDF forms from a spreadsheet");
    assert_eq!(s.objects().await.len(), 2, "one object per skill");

    let page = app.get("/skill/page?page=1&size=1", s.t()).await;
    page.assert_status_ok();
    assert_eq!(
        (
            page.body["page"].as_i64(),
            page.body["size"].as_i64(),
            page.body["total"].as_i64()
        ),
        (Some(1), Some(1), Some(2))
    );
    assert_eq!(page.body["data"].as_array().unwrap().len(), 1);
    let found = app.get("/skill/page?keyword=spreadsheet", s.t()).await;
    let found = found.assert_status_ok().as_array().unwrap().clone();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["id"], up);
    let list = app.get("/skill/list", s.t()).await;
    assert_eq!(
        list.assert_status_ok(),
        &json!([{ "id": up, "name": "pdf-forms", "description": "Fill in PDF forms from a spreadsheet" },
                { "id": id, "name": "release-notes", "description": "d" }])
    );

    // Metadata update rewrites SKILL.md's front matter, keeping its other keys and the body.
    let updated = app
        .put(
            &format!("/skill/{up}"),
            s.t(),
            &json!({ "name": "pdf-forms-2", "description": "Fill: forms" }),
        )
        .await;
    let v = updated.assert_status_ok();
    assert_eq!(
        (v["name"].as_str(), v["version"].as_i64()),
        (Some("pdf-forms-2"), Some(2))
    );
    let md = s.read(up, "SKILL.md").await;
    let md = md.assert_status_ok()["content"].as_str().unwrap().to_owned();
    assert_eq!(
        md,
        SKILL_MD.replace(
            "name: pdf-forms\ndescription: Fill in PDF forms from a spreadsheet",
            "name: pdf-forms-2\ndescription: \"Fill: forms\""
        )
    );

    let tree = app.get(&format!("/skill/{up}/files"), s.t()).await;
    let tree = tree.assert_status_ok();
    assert_eq!(
        (tree["type"].as_str(), tree["path"].as_str()),
        (Some("directory"), Some(""))
    );
    let top: Vec<(&str, &str)> = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["path"].as_str().unwrap(), c["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        top,
        [("assets", "directory"), ("scripts", "directory"), ("SKILL.md", "file")]
    );
    assert_eq!(tree["children"][1]["children"][0]["size"], 14);

    let png = s.read(up, "assets/logo.png").await;
    let png = png.assert_status_ok();
    assert_eq!(png["encoding"], "base64");
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(png["content"].as_str().unwrap())
            .unwrap(),
        PNG
    );

    let files = s.download(up).await;
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["SKILL.md", "assets/logo.png", "scripts/fill.py"]
    );
    let r = app.get(&format!("/skill/{up}/download"), s.t()).await;
    assert!(r.headers["content-disposition"]
        .to_str()
        .unwrap()
        .contains("pdf-forms.zip"));

    // Deleting removes the object and unbinds the skill from agents in the same transaction.
    let agent: i64 = sqlx::query_scalar(
        "INSERT INTO agents (name, creator_id, skill_ids) VALUES ('a', 1, ARRAY[$1, $2]::BIGINT[]) RETURNING id",
    )
    .bind(up)
    .bind(id)
    .fetch_one(&app.db)
    .await
    .unwrap();
    let key_of_up = s.rows().await.into_iter().find(|r| r.0 == up).unwrap().5;
    app.delete(&format!("/skill/{up}"), s.t()).await.assert_status_ok();
    assert!(!s
        .objects()
        .await
        .iter()
        .any(|k| k.contains(key_of_up.trim_start_matches("skills/"))));
    assert_eq!(s.objects().await.len(), 1);
    let ids: Vec<i64> = sqlx::query_scalar("SELECT skill_ids FROM agents WHERE id = $1")
        .bind(agent)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(ids, vec![id]);
    app.get(&format!("/skill/{up}"), s.t())
        .await
        .assert_status_error(404, 404, "skill not found");
    app.delete(&format!("/skill/{up}"), s.t())
        .await
        .assert_status_error(404, 404, "skill not found");
    app.get("/skill/page", None)
        .await
        .assert_status_error(401, 401, "log in");

    // Briefs for agents and chat.
    let briefs = shared::skills::briefs(&app.db, &[up, id]).await.unwrap();
    assert_eq!(briefs.iter().map(|b| b.id).collect::<Vec<_>>(), vec![id]);
    assert_eq!(
        shared::skills::existing_ids(&app.db, &[999, id]).await.unwrap(),
        vec![id]
    );
    let err = shared::skills::ensure_exist(&app.db, "skillIds", &[id, 999])
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "skillIds: no skill with id 999");
    let text = shared::skills::read_text_file(&app.state, id, "SKILL.md")
        .await
        .unwrap();
    assert_eq!(text, starter);
    assert!(shared::skills::read_text_file(&app.state, id, "../x").await.is_err());
}

#[tokio::test]
async fn lifecycle_on_filesystem() {
    lifecycle(Store::Filesystem).await;
}

#[tokio::test]
async fn lifecycle_on_s3() {
    lifecycle(Store::S3).await;
}

async fn round_trip(store: Store) {
    let s = setup(store).await;
    let id = s.upload(package()).await.assert_status_ok()["id"].as_i64().unwrap();
    let old_key = s.rows().await[0].5.clone();
    let w = s
        .write(&s.admin, id, "scripts/fill.py", json!({ "content": "print('v2')\n" }))
        .await;
    assert_eq!(w.assert_status_ok()["version"], 2);
    assert!(
        !s.objects()
            .await
            .iter()
            .any(|k| k.ends_with(old_key.trim_start_matches("skills/"))),
        "old package deleted"
    );
    let t = s.t();
    s.app
        .post(
            &format!("/skill/{id}/files"),
            t,
            &json!({ "path": "docs", "type": "directory" }),
        )
        .await
        .assert_status_ok();
    s.app
        .post(
            &format!("/skill/{id}/files"),
            t,
            &json!({ "path": "docs/empty.md", "type": "file" }),
        )
        .await
        .assert_status_ok();
    s.write(&s.admin, id, "docs/guide.md", json!({ "content": "# Guide\n" }))
        .await
        .assert_status_ok();
    s.write(
        &s.admin,
        id,
        "assets/blob.bin",
        json!({ "content": "AAEC/w==", "encoding": "base64" }),
    )
    .await
    .assert_status_ok();
    let r = s
        .app
        .put(
            &format!("/skill/{id}/files/rename"),
            t,
            &json!({ "oldPath": "scripts", "newPath": "tools/py" }),
        )
        .await;
    assert!(r.assert_status_ok().is_null());
    s.app
        .delete(&format!("/skill/{id}/files?path=assets/logo.png"), t)
        .await
        .assert_status_ok();
    // UTF-8 text holding a NUL reads back as base64, as it can only be written.
    s.write(
        &s.admin,
        id,
        "assets/nul.txt",
        json!({ "content": "YQBi", "encoding": "base64" }),
    )
    .await
    .assert_status_ok();
    let nul = s.read(id, "assets/nul.txt").await;
    assert_eq!(
        (
            nul.assert_status_ok()["encoding"].as_str(),
            nul.assert_status_ok()["content"].as_str()
        ),
        (Some("base64"), Some("YQBi"))
    );
    s.app
        .delete(&format!("/skill/{id}/files?path=assets/nul.txt"), t)
        .await
        .assert_status_ok();
    let new_md = SKILL_MD.replace("name: pdf-forms", "name: forms-filler");
    s.write(&s.admin, id, "SKILL.md", json!({ "content": new_md }))
        .await
        .assert_status_ok();

    let files = s.download(id).await;
    let expected: BTreeMap<String, Vec<u8>> = [
        ("SKILL.md", new_md.as_bytes().to_vec()),
        ("assets/blob.bin", vec![0, 1, 2, 255]),
        ("docs/empty.md", vec![]),
        ("docs/guide.md", b"# Guide\n".to_vec()),
        ("tools/py/fill.py", b"print('v2')\n".to_vec()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(files, expected);
    let rows = s.rows().await;
    assert_eq!(
        (rows[0].1.as_str(), rows[0].6),
        ("forms-filler", 11),
        "SKILL.md renames the skill; one version per change"
    );
    assert_eq!(s.objects().await.len(), 1, "exactly one package object");
}

/// A whole package replaced by an upload keeps the skill's id, its agents and its place; a
/// file above the online editor's limit is changed this way. Refusals change nothing.
async fn replaced_whole(store: Store) {
    let s = setup(store).await;
    // One byte above this setup's SKILL_MAX_FILE_BYTES.
    let big = vec![b'x'; 16 * 1024 + 1];
    let first = s
        .upload(zip_of(&[("SKILL.md", SKILL_MD.as_bytes()), ("assets/table.csv", &big)]))
        .await;
    let id = first.assert_status_ok()["id"].as_i64().unwrap();
    let agent = s
        .app
        .post(
            "/agent",
            s.t(),
            &json!({ "name": "Forms", "skillEnabled": true, "skillIds": [id] }),
        )
        .await;
    let agent = agent.assert_ok().as_i64().unwrap();
    s.read(id, "assets/table.csv")
        .await
        .assert_status_error(413, 413, "POST /skill/{id}/upload");

    let path = format!("/skill/{id}/upload");
    let before = s.snapshot().await;
    let (_, other) = s.app.regular_user("mallory").await;
    let renamed = SKILL_MD.replace("name: pdf-forms", "name: pdf-forms-2");
    let next = zip_of(&[("SKILL.md", renamed.as_bytes()), ("assets/table.csv", b"a,b\n1,2\n")]);
    for (token, at, status, needle) in [
        (other.as_str(), path.clone(), 403, "only the skill's creator"),
        (
            s.admin.as_str(),
            "/skill/999999/upload".to_owned(),
            404,
            "skill not found",
        ),
        (s.admin.as_str(), format!("{path}?version=7"), 409, "you had version 7"),
    ] {
        s.upload_to(&at, token, "next.zip", next.clone())
            .await
            .assert_status_error(status, status as i64, needle);
    }
    s.upload_to(&path, &s.admin, "bad.zip", b"not a zip".to_vec())
        .await
        .assert_status_error(400, 0, "not a valid zip archive");
    assert_eq!(s.snapshot().await, before, "refusals change nothing");

    let replaced = s
        .upload_to(&format!("{path}?version=1"), &s.admin, "next.zip", next)
        .await;
    let r = replaced.assert_status_ok();
    assert_eq!(
        (
            r["id"].as_i64(),
            r["name"].as_str(),
            r["fileName"].as_str(),
            r["version"].as_i64()
        ),
        (Some(id), Some("pdf-forms-2"), Some("next.zip"), Some(2))
    );
    assert_eq!(s.download(id).await["assets/table.csv"], b"a,b\n1,2\n");
    let bound = s.app.get(&format!("/agent/{agent}"), s.t()).await;
    assert_eq!(bound.assert_ok()["skills"][0]["name"], "pdf-forms-2");
    assert_eq!(s.objects().await.len(), 1, "the old package object is gone");
}

#[tokio::test]
async fn replaced_whole_on_filesystem() {
    replaced_whole(Store::Filesystem).await;
}

#[tokio::test]
async fn replaced_whole_on_s3() {
    replaced_whole(Store::S3).await;
}

#[tokio::test]
async fn round_trip_on_filesystem() {
    round_trip(Store::Filesystem).await;
}

#[tokio::test]
async fn round_trip_on_s3() {
    round_trip(Store::S3).await;
}

fn symlink_zip() -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    let o = SimpleFileOptions::default();
    w.start_file("SKILL.md", o).unwrap();
    w.write_all(SKILL_MD.as_bytes()).unwrap();
    w.add_symlink("secrets", "/etc/passwd", o).unwrap();
    w.finish().unwrap().into_inner()
}

async fn refusals(store: Store) {
    let s = setup(store).await;
    let id = s.upload(package()).await.assert_status_ok()["id"].as_i64().unwrap();
    let before = s.snapshot().await;
    let md = SKILL_MD.as_bytes();
    let zeros = vec![0u8; 2 * 1024 * 1024];
    let many: Vec<(String, Vec<u8>)> = (0..11).map(|i| (format!("f{i}.txt"), vec![b'x'])).collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(n, d)| (n.as_str(), d.as_slice())).collect();
    // Entries below 64 KiB are not ratio-checked, so these pass one by one but not together.
    let block = vec![0u8; 63 * 1024];
    let mut wide: Vec<(String, &[u8])> = (0..9).map(|i| (format!("z{i}.bin"), block.as_slice())).collect();
    wide.push(("SKILL.md".to_owned(), md));
    let wide: Vec<(&str, &[u8])> = wide.iter().map(|(n, d)| (n.as_str(), *d)).collect();
    let noise: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let uploads: Vec<(Vec<u8>, u16, i64, &str)> = vec![
        (
            zip_of(&[("SKILL.md", md), ("../../evil.sh", b"x")]),
            400,
            0,
            "contains '..'",
        ),
        (
            zip_of(&[("SKILL.md", md), ("/etc/cron.d/evil", b"x")]),
            400,
            0,
            "is absolute",
        ),
        (symlink_zip(), 400, 0, "symbolic link"),
        (zip_of(&[("SKILL.md", md), ("zeros.bin", &zeros)]), 400, 0, "zip bomb"),
        (zip_of(&many), 413, 413, "11 files and directories"),
        (zip_of(&wide), 413, 413, "unpack to more than 524288 bytes"),
        (noise, 413, 413, "exceeds the limit of 65536 bytes"),
        (zip_of(&[("README.md", b"x")]), 400, 0, "must have a SKILL.md"),
        (
            zip_of(&[("SKILL.md", b"# no front matter")]),
            400,
            0,
            "must start with YAML front matter",
        ),
        (
            zip_of(&[("SKILL.md", b"---\nname: [a]\n---\n")]),
            400,
            0,
            "plain string",
        ),
        (
            zip_of(&[("SKILL.md", b"---\ndescription: d\n---\n")]),
            400,
            0,
            "non-empty 'name'",
        ),
        (b"PK not a zip".to_vec(), 400, 0, "not a valid zip"),
    ];
    for (bytes, http, status, needle) in uploads {
        s.upload(bytes).await.assert_status_error(http, status, needle);
        assert_eq!(s.snapshot().await, before, "after refusing upload ({needle})");
    }
    let empty = reqwest::multipart::Form::new().text("other", "x");
    let req = s.app.client.post(s.app.url("/skill/upload")).multipart(empty);
    s.app
        .send(with_token(req, s.t()))
        .await
        .assert_status_error(400, 0, "file is required");

    let t = s.t();
    let f = |p: &str| format!("/skill/{id}/files{p}");
    let big = "x".repeat(16385);
    let cases: Vec<(Reply, u16, i64, &str)> = vec![
        (s.read(id, "../SKILL.md").await, 400, 0, "path contains '..'"),
        (s.read(id, "/etc/passwd").await, 400, 0, "path is absolute"),
        (s.read(id, "nope.md").await, 404, 404, "no file at path"),
        (s.read(id, "scripts").await, 400, 0, "is a directory"),
        (s.app.get(&f("/content"), t).await, 400, 0, "path is required"),
        (
            s.write(&s.admin, id, "../../escape.sh", json!({ "content": "x" }))
                .await,
            400,
            0,
            "contains '..'",
        ),
        (
            s.write(&s.admin, id, "/abs.sh", json!({ "content": "x" })).await,
            400,
            0,
            "is absolute",
        ),
        (
            s.write(&s.admin, id, "a.md", json!({})).await,
            400,
            0,
            "content is required",
        ),
        (
            s.write(&s.admin, id, "a.md", json!({ "content": big })).await,
            413,
            413,
            "16385 bytes",
        ),
        (
            s.write(&s.admin, id, "a.bin", json!({ "content": "%%%", "encoding": "base64" }))
                .await,
            400,
            0,
            "not valid base64",
        ),
        (
            s.write(&s.admin, id, "a.md", json!({ "content": "x", "encoding": "latin1" }))
                .await,
            400,
            0,
            "encoding must be",
        ),
        (
            s.write(&s.admin, id, "SKILL.md", json!({ "content": "no front matter" }))
                .await,
            400,
            0,
            "must start with YAML front matter",
        ),
        (
            s.write(&s.admin, id, "scripts", json!({ "content": "x" })).await,
            400,
            0,
            "is a directory",
        ),
        (
            s.write(&s.admin, id, "SKILL.md/x", json!({ "content": "x" })).await,
            400,
            0,
            "is a file",
        ),
        (
            s.app
                .post(&f(""), t, &json!({ "path": "scripts/fill.py", "type": "file" }))
                .await,
            400,
            0,
            "already exists",
        ),
        (
            s.app.post(&f(""), t, &json!({ "path": "x", "type": "link" })).await,
            400,
            0,
            "type must be file or directory",
        ),
        (
            s.app
                .post(&f(""), t, &json!({ "path": "a/../../b", "type": "file" }))
                .await,
            400,
            0,
            "contains '..'",
        ),
        (
            s.app
                .post(&f(""), t, &json!({ "path": "docs /old.md", "type": "file" }))
                .await,
            400,
            0,
            "path names a folder ending with a space",
        ),
        (
            s.app
                .put(
                    &f("/rename"),
                    t,
                    &json!({ "oldPath": "scripts/fill.py", "newPath": "docs /fill.py" }),
                )
                .await,
            400,
            0,
            "newPath names a folder ending with a space",
        ),
        (s.app.delete(&f("?path=SKILL.md"), t).await, 400, 0, "cannot be deleted"),
        (
            s.app.delete(&f("?path=missing"), t).await,
            404,
            404,
            "no file or directory",
        ),
        (s.app.delete(&f("?path=../x"), t).await, 400, 0, "contains '..'"),
        (
            s.app
                .put(&f("/rename"), t, &json!({ "oldPath": "SKILL.md", "newPath": "x.md" }))
                .await,
            400,
            0,
            "cannot be renamed",
        ),
        (
            s.app
                .put(
                    &f("/rename"),
                    t,
                    &json!({ "oldPath": "scripts", "newPath": "SKILL.md" }),
                )
                .await,
            400,
            0,
            "already exists",
        ),
        (
            s.app
                .put(
                    &f("/rename"),
                    t,
                    &json!({ "oldPath": "scripts", "newPath": "scripts/deeper" }),
                )
                .await,
            400,
            0,
            "cannot move into itself",
        ),
        (
            s.app
                .put(&f("/rename"), t, &json!({ "oldPath": "scripts", "newPath": "../out" }))
                .await,
            400,
            0,
            "newPath contains '..'",
        ),
        (
            s.app
                .put(&f("/rename"), t, &json!({ "oldPath": "ghost", "newPath": "x" }))
                .await,
            404,
            404,
            "no file or directory",
        ),
        (
            s.app.put(&format!("/skill/{id}"), t, &json!({ "name": " " })).await,
            400,
            0,
            "name is required",
        ),
        (
            s.app
                .put(&format!("/skill/{id}"), t, &json!({ "name": "n".repeat(65) }))
                .await,
            400,
            0,
            "1 to 64",
        ),
        (
            s.app
                .put(&format!("/skill/{id}"), t, &json!({ "description": "d".repeat(1025) }))
                .await,
            400,
            0,
            "at most 1024",
        ),
        (
            s.app.post("/skill", t, &json!({ "description": "d" })).await,
            400,
            0,
            "name is required",
        ),
        (s.app.get("/skill/999/files", t).await, 404, 404, "skill not found"),
    ];
    for (reply, http, status, needle) in cases {
        reply.assert_status_error(http, status, needle);
    }
    assert_eq!(s.snapshot().await, before, "after the file refusals");

    // Another regular user may read but not change someone else's skill.
    let (_, other) = s.app.regular_user("otto").await;
    let o = Some(other.as_str());
    s.app.get(&format!("/skill/{id}"), o).await.assert_status_ok();
    s.app.get(&f("/content?path=SKILL.md"), o).await.assert_status_ok();
    let denied = [
        s.write(&other, id, "a.md", json!({ "content": "x" })).await,
        s.app.put(&format!("/skill/{id}"), o, &json!({ "name": "mine" })).await,
        s.app.delete(&format!("/skill/{id}"), o).await,
        s.app.delete(&f("?path=scripts"), o).await,
        s.app
            .put(&f("/rename"), o, &json!({ "oldPath": "scripts", "newPath": "x" }))
            .await,
        s.app.post(&f(""), o, &json!({ "path": "x", "type": "file" })).await,
    ];
    for reply in denied {
        reply.assert_status_error(403, 403, "creator or an administrator");
    }
    assert_eq!(s.snapshot().await, before, "after the permission refusals");
    // Their own skill they may change.
    let own = s.upload_as(&other, "own.zip", package()).await;
    let own = own.assert_status_ok()["id"].as_i64().unwrap();
    s.write(&other, own, "notes.md", json!({ "content": "mine" }))
        .await
        .assert_status_ok();
}

#[tokio::test]
async fn refusals_change_nothing_on_filesystem() {
    refusals(Store::Filesystem).await;
}

#[tokio::test]
async fn refusals_change_nothing_on_s3() {
    refusals(Store::S3).await;
}

async fn concurrent_writes(store: Store) {
    let s = setup(store).await;
    let id = s.create("shared-notes").await;
    // Two editors read version 1; the first save wins, the second is told of the conflict.
    let v = s.read(id, "SKILL.md").await.assert_status_ok()["version"]
        .as_i64()
        .unwrap();
    assert_eq!(v, 1);
    let a = s
        .write(&s.admin, id, "notes.md", json!({ "content": "from A", "version": v }))
        .await;
    assert_eq!(a.assert_status_ok()["version"], 2);
    let before = s.snapshot().await;
    let b = s
        .write(&s.admin, id, "notes.md", json!({ "content": "from B", "version": v }))
        .await;
    b.assert_status_error(
        409,
        409,
        "changed by someone else (you had version 1, it is now version 2)",
    );
    assert_eq!(s.snapshot().await, before, "the loser wrote nothing");
    assert_eq!(s.read(id, "notes.md").await.assert_status_ok()["content"], "from A");
    s.app
        .put(
            &format!("/skill/{id}/files/rename"),
            s.t(),
            &json!({ "oldPath": "notes.md", "newPath": "n.md", "version": 1 }),
        )
        .await
        .assert_status_error(409, 409, "reload it");

    // Racing requests without a version, each to its own path: one overtaken by another's
    // save applies its edit again to the package as it is then. Each of 4 writers is
    // overtaken at most 3 times (once by each other's save), under the 4 attempts it has, so
    // every one is saved.
    let paths: Vec<String> = (0..4).map(|i| format!("race/{i}.md")).collect();
    let writes = paths
        .iter()
        .enumerate()
        .map(|(i, p)| s.write(&s.admin, id, p, json!({ "content": format!("writer {i}") })));
    let replies = futures::future::join_all(writes).await;
    let files = s.download(id).await;
    for (i, r) in replies.iter().enumerate() {
        let path = format!("race/{i}.md");
        r.assert_status_ok();
        assert_eq!(
            files.get(&path).map(Vec::as_slice),
            Some(format!("writer {i}").as_bytes()),
            "lost update of {path}"
        );
    }
    assert_eq!(s.rows().await[0].6, 2 + 4, "one version per write");
    assert_eq!(s.objects().await.len(), 1, "losers' objects were removed");
}

/// An edit without a version is applied again over a change that overtook it only when that
/// change left the edit's paths alone: a folder delete overtaken by a file written into the
/// folder would have deleted that file unseen.
#[tokio::test]
async fn an_overtaken_edit_is_not_applied_again_over_a_change_to_its_own_paths() {
    let s = setup(Store::Filesystem).await;
    let id = s.create("shared-docs").await;
    s.write(&s.admin, id, "docs/a.md", json!({ "content": "a" }))
        .await
        .assert_status_ok();
    // Both read the package, then queue behind the test's lock on the skill's row: the write
    // first, so the delete finds its folder changed when it tries again.
    let mut lock = s.app.db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM skills WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *lock)
        .await
        .unwrap();
    let write = s.write(&s.admin, id, "docs/new.md", json!({ "content": "added meanwhile" }));
    let delete = async {
        api_tests::until_statements_wait_for_locks(&s.app.db, 1).await;
        s.app.delete(&format!("/skill/{id}/files?path=docs"), s.t()).await
    };
    let release = async {
        api_tests::until_statements_wait_for_locks(&s.app.db, 2).await;
        lock.commit().await.unwrap();
    };
    let (written, deleted, ()) = tokio::join!(write, delete, release);
    written.assert_status_ok();
    deleted.assert_status_error(409, 409, "docs changed by another edit");
    let files = s.download(id).await;
    assert_eq!(
        files.get("docs/new.md").map(Vec::as_slice),
        Some(b"added meanwhile".as_slice())
    );
    assert!(files.contains_key("docs/a.md"));
}

#[tokio::test]
async fn concurrent_writes_on_filesystem() {
    concurrent_writes(Store::Filesystem).await;
}

#[tokio::test]
async fn concurrent_writes_on_s3() {
    concurrent_writes(Store::S3).await;
}

async fn chat_model(s: &Setup, server: &ModelServer, key: &str) -> i64 {
    let p = s.app.provider(&s.admin, &format!("p-{key}")).await;
    s.app
        .model(
            &s.admin,
            p,
            "CHAT",
            key,
            &server.base_url,
            json!({ "isDefault": true, "scope": "GLOBAL" }),
        )
        .await
}

async fn usage_rows(app: &TestApp) -> Vec<(String, bool)> {
    sqlx::query_as("SELECT call_kind, success FROM model_usage ORDER BY id")
        .fetch_all(&app.db)
        .await
        .unwrap()
}

#[tokio::test]
async fn ai_drafts_use_the_default_chat_model() {
    let s = setup(Store::Filesystem).await;
    let server = ModelServer::start().await;
    let id = s.upload(package()).await.assert_status_ok()["id"].as_i64().unwrap();
    chat_model(&s, &server, "chat-echo").await;
    let before = s.snapshot().await;
    let t = s.t();

    let g = s
        .app
        .post(
            "/skill/ai/generate",
            t,
            &json!({ "requirement": "Turn meeting notes into action items", "name": "action-items" }),
        )
        .await;
    let d = g.assert_status_ok();
    // The echo model answers without front matter, so the draft keeps its text as instructions.
    assert_eq!(d["name"], "action-items");
    assert_eq!(d["description"], "Turn meeting notes into action items");
    let content = d["skillContent"].as_str().unwrap();
    assert!(content.starts_with("---\nname: action-items\n"), "{content}");
    assert!(
        content.contains("You said: Write a skill for this requirement:\nTurn meeting notes into action items"),
        "{content}"
    );
    assert_eq!(d["warnings"].as_array().unwrap().len(), 1);
    assert!(d["warnings"][0].as_str().unwrap().contains("no usable front matter"));

    let o = s
        .app
        .post(
            &format!("/skill/{id}/ai/optimize"),
            t,
            &json!({ "requirement": "Add error handling", "optimizeInstruction": "be brief" }),
        )
        .await;
    let d = o.assert_status_ok();
    let content = d["skillContent"].as_str().unwrap();
    assert!(
        content.contains("1. Read the sheet."),
        "the saved SKILL.md was sent: {content}"
    );
    assert!(content.contains("Additional instruction: be brief"));
    assert_eq!(d["name"], "pdf-forms");
    let o = s
        .app
        .post(
            &format!("/skill/{id}/ai/optimize"),
            t,
            &json!({ "requirement": "r", "currentContent": "---\nname: draft-x\n---\nunsaved text" }),
        )
        .await;
    let d = o.assert_status_ok();
    assert!(d["skillContent"].as_str().unwrap().contains("unsaved text"));
    assert_eq!(d["name"], "draft-x");
    // A name and description the request chooses are put to the model and kept in the draft.
    let o = s
        .app
        .post(
            &format!("/skill/{id}/ai/optimize"),
            t,
            &json!({ "requirement": "r", "name": "form-helper", "description": "Helps with forms." }),
        )
        .await;
    let d = o.assert_status_ok();
    assert_eq!(
        (&d["name"], &d["description"]),
        (&json!("form-helper"), &json!("Helps with forms."))
    );
    let asked = server.requests()[3]["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        asked.contains("The skill's name must be: form-helper")
            && asked.contains("The skill's description must be: Helps with forms."),
        "{asked}"
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[0]["messages"][0]["role"], "system");
    assert_eq!(
        usage_rows(&s.app).await,
        vec![("skill-draft".to_owned(), true); 4],
        "metered"
    );
    assert_eq!(s.snapshot().await, before, "drafts are never saved");

    // A regular user whose quota is used up gets the fallback, and the model is not called.
    let (uid, user) = s.app.regular_user("quentin").await;
    sqlx::query("UPDATE users SET tokens = 0 WHERE id = $1")
        .bind(uid)
        .execute(&s.app.db)
        .await
        .unwrap();
    let g = s
        .app
        .post(
            "/skill/ai/generate",
            Some(&user),
            &json!({ "requirement": "Draft release notes" }),
        )
        .await;
    let w = g.assert_status_ok()["warnings"][0].as_str().unwrap().to_owned();
    assert!(
        w.contains("quota is used up") && w.contains("rule-based template"),
        "{w}"
    );
    assert_eq!(server.requests().len(), 4);
    s.app
        .post("/skill/ai/generate", t, &json!({}))
        .await
        .assert_status_error(400, 0, "requirement is required");
    s.app
        .post("/skill/999/ai/optimize", t, &json!({ "requirement": "r" }))
        .await
        .assert_status_error(404, 404, "skill not found");
    s.app
        .post(
            &format!("/skill/{id}/ai/optimize"),
            t,
            &json!({ "requirement": "r".repeat(4001) }),
        )
        .await
        .assert_status_error(400, 0, "requirement must be");
    // A name or description a skill could not be saved with is refused before the paid call.
    for (body, needle) in [
        (
            json!({ "requirement": "r", "name": "n".repeat(65) }),
            "name must be 1 to 64",
        ),
        (
            json!({ "requirement": "r", "description": "d".repeat(1025) }),
            "description must be at most 1024",
        ),
    ] {
        s.app
            .post("/skill/ai/generate", t, &body)
            .await
            .assert_status_error(400, 0, needle);
    }
    s.app
        .post(
            &format!("/skill/{id}/ai/optimize"),
            t,
            &json!({ "requirement": "r", "name": "n".repeat(65) }),
        )
        .await
        .assert_status_error(400, 0, "name must be 1 to 64");
    // What else goes into the paid prompt is held to limits too.
    for (path, body, needle) in [
        (
            "/skill/ai/generate".to_owned(),
            json!({ "requirement": "r", "optimizeInstruction": "i".repeat(4001) }),
            "optimizeInstruction must be 0 to 4000 characters long",
        ),
        (
            format!("/skill/{id}/ai/optimize"),
            json!({ "requirement": "r", "optimizeInstruction": "i".repeat(4001) }),
            "optimizeInstruction must be 0 to 4000 characters long",
        ),
        (
            format!("/skill/{id}/ai/optimize"),
            json!({ "requirement": "r", "currentContent": "c".repeat(1024 * 1024 + 1) }),
            "currentContent must be at most 16384 bytes",
        ),
    ] {
        s.app.post(&path, t, &body).await.assert_status_error(400, 0, needle);
    }
    assert_eq!(server.requests().len(), 4, "no model call for a refused draft");
}

#[tokio::test]
async fn ai_drafts_fall_back_without_a_usable_model() {
    let s = setup(Store::Filesystem).await;
    let server = ModelServer::start().await;
    let id = s.upload(package()).await.assert_status_ok()["id"].as_i64().unwrap();
    let before = s.snapshot().await;
    let t = s.t();
    let check_fallbacks = |reason: &'static str| {
        let s = &s;
        async move {
            let g = s
                .app
                .post(
                    "/skill/ai/generate",
                    t,
                    &json!({ "requirement": "Summarise PDF invoices each month" }),
                )
                .await;
            let d = g.assert_status_ok();
            assert_eq!(d["name"], "summarise-pdf-invoices-each-month");
            let content = d["skillContent"].as_str().unwrap();
            assert!(
                content.starts_with(
                    "---\nname: summarise-pdf-invoices-each-month\ndescription: Summarise PDF invoices each month\n---"
                ),
                "{content}"
            );
            assert!(content.contains("## Steps"));
            let w = d["warnings"][0].as_str().unwrap();
            assert!(w.contains("rule-based template") && w.contains(reason), "{w}");

            let o = s
                .app
                .post(
                    &format!("/skill/{id}/ai/optimize"),
                    t,
                    &json!({ "requirement": "shorter" }),
                )
                .await;
            let d = o.assert_status_ok();
            assert_eq!(d["skillContent"], SKILL_MD, "the current content is kept");
            assert_eq!(d["name"], "pdf-forms");
            let w = d["warnings"][0].as_str().unwrap();
            assert!(w.contains("current content was kept") && w.contains(reason), "{w}");
        }
    };
    check_fallbacks("no default CHAT model").await;

    let failing = chat_model(&s, &server, "chat-500").await;
    check_fallbacks("the model call failed").await;
    assert!(usage_rows(&s.app)
        .await
        .iter()
        .all(|(kind, ok)| kind == "skill-draft" && !ok));

    s.app
        .put(&format!("/ai-model/config/{failing}/disable"), t, &json!({}))
        .await
        .assert_status_ok();
    check_fallbacks("no default CHAT model").await;
    assert_eq!(s.snapshot().await, before, "drafts are never saved");
}

/// A draft's model call ends before API Gateway's 29 s: a model that does not answer gives the
/// template, saying it timed out, where the gateway would have answered 504 while the call went
/// on.
#[tokio::test]
async fn ai_drafts_fall_back_when_the_model_does_not_answer_in_time() {
    let app = spawn_with(Store::Filesystem, &[("BUFFERED_MODEL_TIMEOUT_SECS", "1")]).await;
    let admin = app.admin_token().await;
    let s = Setup {
        app,
        bucket: None,
        admin,
    };
    let default = json!({ "isDefault": true, "scope": "GLOBAL" });
    s.app.silent_model(&s.admin, "CHAT", "chat-echo", default).await;
    let started = std::time::Instant::now();
    let g = s
        .app
        .post(
            "/skill/ai/generate",
            s.t(),
            &json!({ "requirement": "Summarise PDF invoices each month" }),
        )
        .await;
    let d = g.assert_status_ok();
    let w = d["warnings"][0].as_str().unwrap();
    assert!(w.contains("rule-based template") && w.contains("timed out"), "{w}");
    assert!(started.elapsed() < std::time::Duration::from_secs(29));
    assert_eq!(usage_rows(&s.app).await, [("skill-draft".to_owned(), false)]);

    // Cut at its limit, a call is charged the prompt it was sent: charged nothing, a draft
    // asked to outlast the limit was free, however often it was asked for.
    let (alice_id, alice) = s.app.regular_user("alice").await;
    s.app.set_tokens(alice_id, 100_000).await;
    let long = json!({ "requirement": "Summarise every invoice. ".repeat(160) });
    let g = s.app.post("/skill/ai/generate", Some(&alice), &long).await;
    assert!(g.assert_status_ok()["warnings"][0]
        .as_str()
        .unwrap()
        .contains("timed out"));
    let left = s.app.tokens_of(alice_id).await;
    assert!(
        left <= 100_000 - 1_000,
        "the prompt of about 1,000 tokens was charged: {left} left"
    );
}

/// A regular user creates at most SKILL_MAX_PER_USER skills, by either route; a refusal
/// stores nothing, and administrators are not counted.
#[tokio::test]
async fn a_regular_user_creates_at_most_skill_max_per_user_skills() {
    let app = spawn_with(Store::Filesystem, &[("SKILL_MAX_PER_USER", "2")]).await;
    let admin = app.admin_token().await;
    let (_, user) = app.regular_user("maker").await;
    let s = Setup {
        app,
        bucket: None,
        admin,
    };
    for name in ["one", "two"] {
        s.app
            .post("/skill", Some(&user), &json!({ "name": name }))
            .await
            .assert_status_ok();
    }
    let before = s.snapshot().await;
    s.app
        .post("/skill", Some(&user), &json!({ "name": "three" }))
        .await
        .assert_status_error(400, 0, "limit of 2 skills (SKILL_MAX_PER_USER)");
    s.upload_as(&user, "pdf-forms.zip", package())
        .await
        .assert_status_error(400, 0, "limit of 2 skills");
    assert_eq!(s.snapshot().await, before, "a refusal stores nothing");
    for name in ["a1", "a2", "a3"] {
        s.create(name).await;
    }
}

/// A text file at the default limit (1 MiB) is written back online whatever its characters:
/// as JSON, control characters take six bytes each, which passed the default 2 MiB body limit
/// at a third of the file's own.
#[tokio::test]
async fn a_file_within_its_limit_is_written_whatever_its_escaping() {
    let app = spawn_with(Store::Filesystem, &[]).await;
    let admin = app.admin_token().await;
    let s = Setup {
        app,
        bucket: None,
        admin,
    };
    let id = s.create("escapes").await;
    let text = "\u{1b}".repeat(1_000_000);
    s.write(&s.admin, id, "notes.md", json!({ "content": text }))
        .await
        .assert_status_ok();
    let files = s.download(id).await;
    assert_eq!(files["notes.md"].len(), 1_000_000);
    // Past the file's limit, the refusal names it.
    let over = "\u{1b}".repeat(1_048_577);
    s.write(&s.admin, id, "notes.md", json!({ "content": over }))
        .await
        .assert_status_error(413, 413, "files above 1048576 bytes cannot be opened or saved online");
}

/// The selection list holds at most 1,000 skills (any user may create them, and all of them
/// listed outgrew a function's answer, for everyone, once one user made thousands): the
/// caller's own come first, then administrators', then the rest, each by name.
#[tokio::test]
async fn the_selection_list_is_capped_with_the_callers_and_administrators_skills_first() {
    let s = setup(Store::Filesystem).await;
    let app = &s.app;
    let (_, carol) = app.regular_user("carol").await;
    let (dave, _) = app.regular_user("dave").await;
    sqlx::query(
        "INSERT INTO skills (name, storage_key, creator_id)
         SELECT 'a-' || i, 'skills/many/' || i, $1 FROM generate_series(1, 1000) i",
    )
    .bind(dave)
    .execute(&app.db)
    .await
    .unwrap();
    let make = async |token: &str, name: &str| {
        let made = app
            .post("/skill", Some(token), &json!({ "name": name, "description": "d" }))
            .await;
        made.assert_status_ok()["id"].as_i64().unwrap()
    };
    let admins = make(&s.admin, "zz-shared").await;
    let own = make(&carol, "zz-mine").await;
    let list = app.get("/skill/list", Some(&carol)).await;
    let list = list.assert_status_ok().as_array().unwrap().clone();
    assert_eq!(list.len(), 1000);
    let first: Vec<(i64, &str)> = list[..3]
        .iter()
        .map(|b| (b["id"].as_i64().unwrap(), b["name"].as_str().unwrap()))
        .collect();
    assert_eq!(first[..2], [(own, "zz-mine"), (admins, "zz-shared")]);
    assert_eq!(first[2].1, "a-1");
}
