use api_tests::{bucket, s3_client, spawn, spawn_with, Store, TestApp, PNG};
use reqwest::multipart::Form;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn upload(app: &TestApp, token: &str, name: &str, bytes: Vec<u8>, biz: Option<(&str, &str)>) -> api_tests::Reply {
    app.upload_resource(token, name, bytes, biz).await
}

/// The object exists in the app's store (the temp dir or the LocalStack bucket).
async fn object_exists(app: &TestApp, store: Store, key: &str) -> bool {
    match store {
        Store::Filesystem => app.storage_dir.path().join(key).exists(),
        Store::S3 => s3_client()
            .await
            .head_object()
            .bucket(bucket())
            .key(key)
            .send()
            .await
            .is_ok(),
    }
}

/// Behind API Gateway one answer holds at most BUFFERED_RESPONSE_MAX_BYTES: a download of
/// more at once is refused before the file is read, naming the ranges that fit, and those are
/// answered.
#[tokio::test]
async fn a_download_larger_than_one_answer_holds_asks_for_ranges() {
    let app = api_tests::spawn_with(Store::Filesystem, &[("BUFFERED_RESPONSE_MAX_BYTES", "100000")]).await;
    let (_, token) = app.regular_user("uploader").await;
    let bytes: Vec<u8> = PNG
        .iter()
        .copied()
        .chain((0..200_000u32).map(|i| (i % 251) as u8))
        .collect();
    let id = upload(&app, &token, "big.png", bytes.clone(), None).await.assert_ok()["id"]
        .as_i64()
        .unwrap();
    for route in ["download", "preview"] {
        app.get(&format!("/resource/{id}/{route}"), Some(&token))
            .await
            .assert_error(413, 413, "download the file in byte ranges (Range: bytes=0-99999)");
    }
    // A HEAD reads nothing: download tools ask it for the size and range support first.
    let head = app
        .send(
            app.client
                .head(app.url(&format!("/resource/{id}/download")))
                .header("Svc-Auth", &token),
        )
        .await;
    assert_eq!(head.status, 200);
    assert_eq!(head.headers["content-length"], bytes.len().to_string());
    assert_eq!(head.headers["accept-ranges"], "bytes");
    let part = app
        .send(
            app.client
                .get(app.url(&format!("/resource/{id}/download")))
                .header("Svc-Auth", &token)
                .header("Range", "bytes=0-99999"),
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(&part.bytes[..], &bytes[..100_000]);
}

async fn round_trip(store: Store) {
    let app = spawn(store).await;
    let (user_id, token) = app.regular_user("uploader").await;
    let bytes: Vec<u8> = PNG
        .iter()
        .copied()
        .chain((0..200_000u32).map(|i| (i % 251) as u8))
        .collect();
    let reply = upload(&app, &token, "图片 photo.txt", bytes.clone(), Some(("avatar", "42"))).await;
    let r = reply.assert_ok().clone();
    assert_eq!(r["mimeType"], "image/png", "sniffed from the bytes, not the name");
    assert_eq!(r["fileSize"].as_u64(), Some(bytes.len() as u64));
    assert_eq!(r["storageType"], if store == Store::S3 { "OSS" } else { "LOCAL" });
    assert_eq!(
        (r["bizType"].as_str(), r["bizId"].as_i64(), r["creatorId"].as_i64()),
        (Some("avatar"), Some(42), Some(user_id))
    );
    assert_eq!(r["originalName"], "图片 photo.txt");
    let id = r["id"].as_i64().unwrap();
    assert_eq!(r["accessUrl"], format!("/api/resource/{id}/preview"));
    let key = r["storageKey"].as_str().unwrap().to_owned();
    assert!(object_exists(&app, store, &key).await);

    let preview = app.get(&format!("/resource/{id}/preview"), Some(&token)).await;
    assert_eq!(preview.status, 200);
    assert_eq!(sha(&preview.bytes), sha(&bytes));
    assert_eq!(preview.headers["content-type"], "image/png");
    assert!(preview.headers["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("inline"));

    let download = app.get(&format!("/resource/{id}/download"), Some(&token)).await;
    assert_eq!(sha(&download.bytes), sha(&bytes));
    let disposition = download.headers["content-disposition"].to_str().unwrap().to_owned();
    assert!(
        disposition.starts_with("attachment; filename=\"__ photo.txt\""),
        "{disposition}"
    );
    assert!(
        disposition.contains("filename*=UTF-8''%E5%9B%BE%E7%89%87%20photo.txt"),
        "{disposition}"
    );

    // Range requests.
    let part = app
        .send(
            app.client
                .get(app.url(&format!("/resource/{id}/preview")))
                .header("Svc-Auth", &token)
                .header("Range", "bytes=10-19"),
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(&part.bytes[..], &bytes[10..20]);
    assert_eq!(part.headers["content-range"], format!("bytes 10-19/{}", bytes.len()));
    let bad = app
        .send(
            app.client
                .get(app.url(&format!("/resource/{id}/preview")))
                .header("Svc-Auth", &token)
                .header("Range", "bytes=999999999-"),
        )
        .await;
    assert_eq!(bad.headers["content-range"], format!("bytes */{}", bytes.len()));
    bad.assert_error(416, 416, "not within the file's");

    // Another user cannot delete it; nothing changes.
    let (_, other) = app.regular_user("other").await;
    app.delete(&format!("/resource/{id}"), Some(&other))
        .await
        .assert_error(404, 404, "resource not found");
    assert!(object_exists(&app, store, &key).await);
    assert_eq!(app.count("resources").await, 1);

    // A delete whose commit fails keeps the object its row still names.
    for sql in [
        "CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$",
        "CREATE CONSTRAINT TRIGGER refuse_commit AFTER DELETE ON resources
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()",
    ] {
        sqlx::query(sql).execute(&app.db).await.unwrap();
    }
    app.delete(&format!("/resource/{id}"), Some(&token))
        .await
        .assert_error(500, 500, "");
    assert!(object_exists(&app, store, &key).await, "the object its row names stays");
    assert_eq!(app.count("resources").await, 1);
    sqlx::query("DROP TRIGGER refuse_commit ON resources")
        .execute(&app.db)
        .await
        .unwrap();

    app.delete(&format!("/resource/{id}"), Some(&token)).await.assert_ok();
    assert!(!object_exists(&app, store, &key).await, "object removed from the store");
    assert_eq!(app.count("resources").await, 0);
    app.get(&format!("/resource/{id}/preview"), Some(&token))
        .await
        .assert_error(404, 404, "resource not found");
    app.delete(&format!("/resource/{id}"), Some(&token))
        .await
        .assert_error(404, 404, "resource not found");
}

#[tokio::test]
async fn upload_preview_download_delete_on_the_filesystem() {
    round_trip(Store::Filesystem).await;
}

#[tokio::test]
async fn upload_preview_download_delete_on_s3() {
    round_trip(Store::S3).await;
}

async fn bad_uploads_change_nothing(store: Store) {
    // On S3, a bucket of its own, so that what it holds afterwards is this test's doing.
    let bucket = match store {
        Store::S3 => Some(api_tests::own_bucket("bad-uploads").await),
        Store::Filesystem => None,
    };
    let mut vars = vec![("MAX_UPLOAD_BYTES", "1000")];
    if let Some(b) = &bucket {
        vars.push(("S3_BUCKET", b.as_str()));
    }
    let app = spawn_with(store, &vars).await;
    let (_, token) = app.regular_user("bad").await;
    let too_big = upload(&app, &token, "big.bin", vec![7u8; 5000], None).await;
    too_big.assert_error(413, 413, "exceeds the limit of 1000 bytes");
    let no_file = app
        .send(
            app.client
                .post(app.url("/resource/upload"))
                .header("Svc-Auth", &token)
                .multipart(Form::new().text("bizType", "x")),
        )
        .await;
    no_file.assert_error(400, 0, "file is required");
    upload(&app, &token, "a.txt", b"hi".to_vec(), Some(("doc", "abc")))
        .await
        .assert_error(400, 0, "bizId must be a whole number");
    for id in ["0", "-5"] {
        upload(&app, &token, "a.txt", b"hi".to_vec(), Some(("doc", id)))
            .await
            .assert_error(400, 0, "bizId must be a positive whole number");
    }
    // Bounds hold while the form streams in: a second file is refused before its bytes are
    // read, and a text field is not a way around the file limit.
    let file = |name: &str| reqwest::multipart::Part::bytes(b"hi".to_vec()).file_name(name.to_owned());
    let send = |form: Form| {
        app.send(
            app.client
                .post(app.url("/resource/upload"))
                .header("Svc-Auth", &token)
                .multipart(form),
        )
    };
    send(Form::new().part("file", file("a.txt")).part("file", file("b.txt")))
        .await
        .assert_error(400, 0, "file: send one file per upload");
    send(
        Form::new()
            .text("bizType", "x".repeat(100_000))
            .part("file", file("a.txt")),
    )
    .await
    .assert_error(400, 0, "bizType: a form field may hold at most 65536 bytes");
    let not_multipart = app.post("/resource/upload", Some(&token), &json!({})).await;
    assert_eq!((not_multipart.status, not_multipart.code()), (400, 0));
    // A name is no proof: text named as a PNG is refused, naming the field.
    upload(
        &app,
        &token,
        "a.png",
        b"not an image at all".to_vec(),
        Some(("chat", "1")),
    )
    .await
    .assert_error(400, 0, "file: a.png is named as image/png but its content is");
    upload(&app, "", "a.txt", b"hi".to_vec(), None)
        .await
        .assert_error(401, 401, "log in");
    assert_eq!(app.count("resources").await, 0);
    let leftover = match &bucket {
        Some(b) => api_tests::bucket_keys(b).await,
        None => walk(app.storage_dir.path())
            .into_iter()
            .map(|p| p.display().to_string())
            .collect(),
    };
    assert!(leftover.is_empty(), "nothing written to storage: {leftover:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test]
async fn bad_uploads_change_nothing_on_the_filesystem() {
    bad_uploads_change_nothing(Store::Filesystem).await;
}

#[tokio::test]
async fn bad_uploads_change_nothing_on_s3() {
    bad_uploads_change_nothing(Store::S3).await;
}

#[tokio::test]
async fn page_filters() {
    let app = spawn(Store::Filesystem).await;
    let (_, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    upload(
        &app,
        &alice,
        "report-2024.pdf",
        b"%PDF-1.4 x".to_vec(),
        Some(("document", "1")),
    )
    .await
    .assert_ok();
    upload(&app, &alice, "avatar.png", PNG.to_vec(), Some(("avatar", "2")))
        .await
        .assert_ok();
    upload(&app, &alice, "100%_done.txt", b"x".to_vec(), None)
        .await
        .assert_ok();
    upload(&app, &bob, "bob.txt", b"bob".to_vec(), Some(("document", "1")))
        .await
        .assert_ok();

    let names = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["originalName"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = app.get("/resource/page", Some(&alice)).await;
    let d = all.assert_ok().clone();
    assert_eq!(
        (d["total"].as_i64(), d["page"].as_i64(), d["size"].as_i64()),
        (Some(3), Some(1), Some(10)),
        "only her own"
    );
    let docs = app.get("/resource/page?bizType=document&bizId=1", Some(&alice)).await;
    assert_eq!(names(docs.assert_ok()), vec!["report-2024.pdf"]);
    let search = app.get("/resource/page?originalName=AVATAR", Some(&alice)).await;
    assert_eq!(names(search.assert_ok()), vec!["avatar.png"]);
    let literal = app.get("/resource/page?originalName=%25_", Some(&alice)).await;
    assert_eq!(
        names(literal.assert_ok()),
        vec!["100%_done.txt"],
        "LIKE wildcards are matched literally"
    );
    let paged = app.get("/resource/page?page=2&size=2", Some(&alice)).await;
    assert_eq!(paged.assert_ok()["data"].as_array().unwrap().len(), 1);
    let clamped = app.get("/resource/page?size=100000", Some(&alice)).await;
    assert_eq!(clamped.assert_ok()["size"], 100);

    // A day either side of now, so the run may cross midnight after the uploads.
    let day = |offset: i64| (chrono::Utc::now() + chrono::Duration::days(offset)).format("%Y-%m-%d");
    let range = format!(
        "/resource/page?datetimeRange={}%2000:00:00&datetimeRange={}%2000:00:00",
        day(-1),
        day(2)
    );
    assert_eq!(app.get(&range, Some(&alice)).await.assert_ok()["total"], 3);
    // An end covers the whole second (or day) it names, as the rows show their times.
    let all = app.get("/resource/page", Some(&alice)).await;
    let shown = all.assert_ok()["data"][0]["createDt"]
        .as_str()
        .unwrap()
        .replace(' ', "%20");
    let second = format!("/resource/page?datetimeRange={shown}&datetimeRange={shown}");
    assert!(app.get(&second, Some(&alice)).await.assert_ok()["total"].as_i64() >= Some(1));
    let today = &shown[..10];
    let whole_day = format!("/resource/page?datetimeRange={today},{today}");
    assert!(app.get(&whole_day, Some(&alice)).await.assert_ok()["total"].as_i64() >= Some(1));
    let past = "/resource/page?datetimeRange=2000-01-01%2000:00:00,2000-01-02%2000:00:00";
    assert_eq!(app.get(past, Some(&alice)).await.assert_ok()["total"], 0);
    app.get("/resource/page?datetimeRange=yesterday", Some(&alice))
        .await
        .assert_error(400, 0, "datetimeRange");
    // Years chrono reads but Postgres cannot hold.
    app.get("/resource/page?datetimeRange=-5000-01-01,2000-01-01", Some(&alice))
        .await
        .assert_error(400, 0, "datetimeRange");
    app.get("/resource/page?bizId=x", Some(&alice))
        .await
        .assert_error(400, 0, "bizId");
    // Forms send unset filters empty: they filter nothing, and a page number still counts.
    let blank = app
        .get(
            "/resource/page?bizType=&bizId=&originalName=%20&page=2&size=2",
            Some(&alice),
        )
        .await;
    let blank = blank.assert_ok();
    assert_eq!((blank["total"].as_i64(), blank["page"].as_i64()), (Some(3), Some(2)));

    let admin = app.admin_token().await;
    assert_eq!(
        app.get("/resource/page", Some(&admin)).await.assert_ok()["total"],
        4,
        "administrators see all"
    );
}

async fn object_tags(key: &str) -> Vec<(String, String)> {
    let tags = s3_client()
        .await
        .get_object_tagging()
        .bucket(bucket())
        .key(key)
        .send()
        .await
        .expect("object tagging");
    tags.tag_set()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect()
}

async fn presigned_upload(store: Store) {
    let app = spawn(store).await;
    let (user_id, token) = app.regular_user("big").await;
    let bytes: Vec<u8> = b"%PDF-1.7\n"
        .iter()
        .copied()
        .chain(std::iter::repeat_n(b'x', 300_000))
        .collect();
    let ask = json!({ "originalName": "large.pdf", "fileSize": bytes.len(), "contentType": "application/pdf" });
    let reply = app.post("/resource/upload-url", Some(&token), &ask).await;
    let presigned = reply.assert_ok().clone();
    let key = presigned["storageKey"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("resources/{user_id}/")));
    let url = presigned["uploadUrl"].as_str().unwrap();
    let url = if url.starts_with('/') {
        format!("{}{url}", app.origin)
    } else {
        url.to_owned()
    };

    // Registering before the upload is refused and writes nothing.
    let complete = json!({ "storageKey": key, "originalName": "large.pdf", "bizType": "document" });
    let negative = json!({ "storageKey": key, "originalName": "large.pdf", "bizId": -1 });
    app.post("/resource/upload/complete", Some(&token), &negative)
        .await
        .assert_error(400, 0, "bizId must be a positive whole number");
    app.post("/resource/upload/complete", Some(&token), &complete)
        .await
        .assert_error(400, 0, "storageKey");
    assert_eq!(app.count("resources").await, 0);

    // The client sends every header the answer lists, as the API documents.
    let put_to_url = |body: Vec<u8>| {
        let mut put = app.client.put(&url).body(body);
        for (name, value) in presigned["headers"].as_object().expect("headers") {
            put = put.header(name, value.as_str().expect("header value"));
        }
        put.send()
    };
    // The length is signed: S3 refuses a PUT whose Content-Length is another (the emulators
    // here do not check presigned signatures, so the URL is checked for it); the service's own
    // upload URL refuses it too. A client sends the length it asked for.
    assert_eq!(
        presigned["headers"]["content-length"].as_str(),
        Some(bytes.len().to_string().as_str())
    );
    if matches!(store, Store::S3) {
        let signed = reqwest::Url::parse(&url)
            .unwrap()
            .query_pairs()
            .find(|(k, _)| k == "X-Amz-SignedHeaders")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        assert!(signed.split(';').any(|h| h == "content-length"), "{signed}");
    } else {
        let mut larger = app.client.put(&url).body(vec![b'x'; bytes.len() + 1]);
        for (name, value) in presigned["headers"].as_object().expect("headers") {
            if name != "content-length" {
                larger = larger.header(name, value.as_str().expect("header value"));
            }
        }
        let larger = larger.send().await.unwrap();
        assert_eq!(
            larger.status().as_u16(),
            400,
            "a larger body than the URL was issued for"
        );
        assert_eq!(app.state.storage().head(&key).await.unwrap(), None, "nothing stored");
    }
    let put = put_to_url(bytes.clone()).await.unwrap();
    assert!(put.status().is_success(), "PUT to the presigned URL: {}", put.status());
    // On S3 the upload is staged (expired by the bucket's lifecycle rule) until registered.
    let is_s3 = matches!(store, Store::S3);
    if is_s3 {
        assert_eq!(object_tags(&key).await, vec![("staged".to_owned(), "true".to_owned())]);
    }
    let done = app.post("/resource/upload/complete", Some(&token), &complete).await;
    let r = done.assert_ok().clone();
    assert_eq!(
        (r["mimeType"].as_str(), r["fileSize"].as_u64()),
        (Some("application/pdf"), Some(bytes.len() as u64))
    );
    let download = app.get(&format!("/resource/{}/download", r["id"]), Some(&token)).await;
    assert_eq!(sha(&download.bytes), sha(&bytes));
    if is_s3 {
        assert!(object_tags(&key).await.is_empty(), "a registered upload is kept");
    }

    // Registering twice (a retry whose first answer was lost), or someone else's key, is
    // refused, and the registered file stays as it was.
    app.post("/resource/upload/complete", Some(&token), &complete)
        .await
        .assert_error(400, 0, "already registered");
    let again = app.get(&format!("/resource/{}/download", r["id"]), Some(&token)).await;
    assert_eq!(
        sha(&again.bytes),
        sha(&bytes),
        "the registered file survives a second completion"
    );
    if is_s3 {
        assert!(object_tags(&key).await.is_empty(), "and is not staged again");
    }

    // The URL writes once: a second PUT, however it is sent, would put unchecked bytes behind
    // a checked record (and stage them again for the lifecycle rule). S3 answers 412 (the
    // signed If-None-Match), the service's own upload URL 409. (Of the signed length: another
    // is refused before that.)
    let mut swapped = b"<html>not a pdf</html>".to_vec();
    swapped.resize(bytes.len(), b' ');
    let swapped = put_to_url(swapped).await.unwrap();
    let expected = if is_s3 { 412 } else { 409 };
    assert_eq!(swapped.status().as_u16(), expected, "a second PUT to a used upload URL");
    let after = app.get(&format!("/resource/{}/download", r["id"]), Some(&token)).await;
    assert_eq!(sha(&after.bytes), sha(&bytes), "the registered file is not replaced");
    if is_s3 {
        assert!(object_tags(&key).await.is_empty(), "nor staged again");
    }
    let (_, thief) = app.regular_user("thief").await;
    app.post("/resource/upload/complete", Some(&thief), &complete)
        .await
        .assert_error(403, 403, "not issued to you");
    assert_eq!(app.count("resources").await, 1);
    app.post("/resource/upload-url", Some(&token), &json!({ "fileSize": 1 }))
        .await
        .assert_error(400, 0, "originalName is required");
    app.post(
        "/resource/upload-url",
        Some(&token),
        &json!({ "originalName": "a", "fileSize": 1u64 << 50 }),
    )
    .await
    .assert_error(413, 413, "fileSize exceeds");
}

#[tokio::test]
async fn presigned_upload_on_the_filesystem() {
    presigned_upload(Store::Filesystem).await;
}

#[tokio::test]
async fn presigned_upload_on_s3() {
    presigned_upload(Store::S3).await;
}

/// A presigned upload to the service itself is written as it arrives and refused past
/// MAX_PRESIGNED_UPLOAD_BYTES, or than the `fileSize` its URL was issued for (signed into it),
/// whether the body declares its length or not; nothing is kept.
#[tokio::test]
async fn direct_uploads_over_the_limit_are_refused_while_streaming() {
    let app = spawn_with(Store::Filesystem, &[("MAX_PRESIGNED_UPLOAD_BYTES", "1000")]).await;
    let (_, token) = app.regular_user("big").await;
    let ask = json!({ "originalName": "small.txt", "fileSize": 900, "contentType": "text/plain" });
    let presigned = app
        .post("/resource/upload-url", Some(&token), &ask)
        .await
        .assert_ok()
        .clone();
    let url = format!("{}{}", app.origin, presigned["uploadUrl"].as_str().unwrap());
    // Declared too large: refused from the header, before the body.
    app.send(app.client.put(&url).body(vec![b'x'; 5000]))
        .await
        .assert_error(413, 413, "exceeds the limit of 1000 bytes");
    // Declared within the limit but not the length the URL was issued for: refused, as S3
    // refuses a Content-Length other than the signed one.
    app.send(app.client.put(&url).body(vec![b'x'; 950])).await.assert_error(
        400,
        0,
        "Content-Length is 950, but the upload URL was issued for a file of 900 bytes",
    );
    // Undeclared (chunked): refused once the stream passes the URL's length, before the limit.
    let chunks = futures::stream::iter((0..50).map(|_| Ok::<_, std::io::Error>(vec![b'y'; 100])));
    app.send(app.client.put(&url).body(reqwest::Body::wrap_stream(chunks)))
        .await
        .assert_error(
            413,
            413,
            "larger than the URL takes: the upload URL was issued for a file of 900 bytes",
        );
    // The length is signed: a URL given another one is a forged URL.
    let stretched = url.replace("length=900", "length=1000");
    assert_ne!(stretched, url);
    app.send(app.client.put(&stretched).body(vec![b'x'; 1000]))
        .await
        .assert_error(403, 403, "invalid or expired");
    let leftover = walk(app.storage_dir.path());
    assert!(leftover.is_empty(), "nothing kept in storage: {leftover:?}");
    // A body that breaks off (malformed chunked encoding) is the sender's fault: 400, not 500.
    let path_and_query = presigned["uploadUrl"].as_str().unwrap();
    let host = app.origin.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&host).await.unwrap();
    let request = format!(
        "PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
    );
    tokio::io::AsyncWriteExt::write_all(&mut conn, request.as_bytes())
        .await
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::io::AsyncReadExt::read(&mut conn, &mut answer).await.unwrap();
    let head = String::from_utf8_lossy(&answer[..n]);
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(head.contains("could not be read to its end"), "{head}");
    let leftover = walk(app.storage_dir.path());
    assert!(leftover.is_empty(), "nothing kept in storage: {leftover:?}");
    // Within the limit, chunked too, it is stored whole.
    let chunks = futures::stream::iter((0..9).map(|_| Ok::<_, std::io::Error>(vec![b'z'; 100])));
    let put = app
        .client
        .put(&url)
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    // The file, and its mark as staged until the upload is completed.
    let key = presigned["storageKey"].as_str().unwrap();
    let mut stored = walk(app.storage_dir.path());
    stored.sort();
    let root = app.storage_dir.path();
    assert_eq!(stored, [root.join(".staged").join(key), root.join(key)], "{stored:?}");
    assert_eq!(std::fs::read(root.join(key)).unwrap(), vec![b'z'; 900]);
    let complete = json!({ "storageKey": key, "originalName": "small.txt" });
    app.post("/resource/upload/complete", Some(&token), &complete)
        .await
        .assert_ok();
    assert_eq!(walk(root), [root.join(key)], "kept: no longer staged");
}

#[tokio::test]
async fn forged_direct_upload_urls_are_refused() {
    let app = spawn(Store::Filesystem).await;
    let url = app.url("/resource/direct-upload?key=resources/1/x.txt&length=4&expires=99999999999&sig=00");
    let reply = app.send(app.client.put(url).body("evil")).await;
    reply.assert_error(403, 403, "invalid or expired");
    assert!(walk(app.storage_dir.path()).is_empty());
}

/// Reads of a resource belong to its owner and administrators; everyone else gets the answer
/// of an unknown id. Files of a knowledge-base upload preview are read by their uploader only,
/// and external users' images by nobody through `/resource` (not even the administrator whose
/// app stored them).
#[tokio::test]
async fn only_the_owner_and_administrators_read_a_resource_and_others_get_the_unknown_id_answer() {
    let s = api_tests::chat::ChatSetup::new().await;
    let app = &s.app;
    let admin = &s.admin;
    let (_, alice) = app.regular_user("alice").await;
    let (_, bob) = app.regular_user("bob").await;
    let bytes = b"alice's private notes".to_vec();
    let own = upload(app, &alice, "notes.txt", bytes.clone(), None).await.assert_ok()["id"]
        .as_i64()
        .unwrap();

    // A knowledge-base upload preview, left pending: its files are temporary resources.
    let embedding = s.embedding_model("emb-8").await;
    let kb = app
        .post(
            "/rag",
            Some(&alice),
            &json!({ "name": "diary", "embeddingModelId": embedding, "dimensionOfVectorModel": 8 }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let preview = app
        .preview_documents(&alice, kb, &[("diary.txt", b"Dear diary, a secret.".to_vec())], None)
        .await;
    let staged = preview.assert_ok()["items"][0]["tempResourceId"].as_i64().unwrap();

    // An external user's image, stored under the administrator who created the app.
    let crm = app.create_app(admin, "crm").await;
    let image = json!({ "openId": "ann", "originalName": "a.png", "fileSize": PNG.len(),
        "content": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, PNG) });
    let external = app.ext_post(&crm, "/resource/upload", &image).await.assert_ok()["resourceId"]
        .as_i64()
        .unwrap();

    let unknown = app.get("/resource/987654/download", Some(&bob)).await;
    unknown.assert_error(404, 404, "resource not found");
    let before = app.snapshot().await;
    let refusals = [
        (&bob, own, "another user's upload"),
        (&bob, staged, "another user's upload preview"),
        (admin, staged, "a user's upload preview, to an administrator"),
        (&bob, external, "an external user's image"),
        (&alice, external, "an external user's image"),
        (admin, external, "an external user's image, to the app's creator"),
    ];
    for (token, id, what) in refusals {
        for route in ["preview", "download"] {
            let r = app.get(&format!("/resource/{id}/{route}"), Some(token)).await;
            assert_eq!((r.status, &r.body), (404, &unknown.body), "{route} of {what}");
        }
        let r = app.delete(&format!("/resource/{id}"), Some(token)).await;
        assert_eq!((r.status, &r.body), (404, &unknown.body), "delete of {what}");
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "reads and deletes of others' resources");

    // The owner reads her upload and her preview file; an administrator her upload.
    for (token, id, expected) in [
        (&alice, own, bytes.clone()),
        (admin, own, bytes.clone()),
        (&alice, staged, b"Dear diary, a secret.".to_vec()),
    ] {
        for route in ["preview", "download"] {
            let r = app.get(&format!("/resource/{id}/{route}"), Some(token)).await;
            assert_eq!(r.status, 200, "{route} of {id}: {:?}", r.body);
            assert_eq!(sha(&r.bytes), sha(&expected));
        }
    }

    // Lists follow the same rule.
    let ids = |token: &str| {
        let token = token.to_owned();
        async move {
            let page = app.get("/resource/page?size=100", Some(&token)).await;
            let mut ids: Vec<i64> = page.assert_ok()["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap())
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(ids(&alice).await, vec![own, staged]);
    assert_eq!(ids(admin).await, vec![own]);
    assert_eq!(ids(&bob).await, Vec::<i64>::new());

    // The preview tag cannot be borrowed to hide an upload from administrators.
    upload(
        app,
        &alice,
        "hidden.txt",
        b"x".to_vec(),
        Some(("RAG_UPLOAD_PREVIEW", "1")),
    )
    .await
    .assert_error(400, 0, "bizType RAG_UPLOAD_PREVIEW is reserved");
}
