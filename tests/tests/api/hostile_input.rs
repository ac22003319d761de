//! Hostile input: oversized bodies and uploads, malformed JSON and wrong types, absurd page
//! sizes, SQL metacharacters in every search field, path traversal in path-like fields and
//! header injection. Each refusal names the field or the limit and changes nothing.

use api_tests::{spawn_with, with_token, Reply, Store, TestApp, PNG};
use serde_json::{json, Value};

/// Sends `body` as is, with `content_type`.
async fn raw(app: &TestApp, method: &str, path: &str, token: &str, content_type: &str, body: Vec<u8>) -> Reply {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let req = app
        .client
        .request(method, app.url(path))
        .header("content-type", content_type)
        .body(body);
    app.send(with_token(req, Some(token))).await
}

/// Failure in either envelope: HTTP status, envelope code or status, and the message.
#[track_caller]
fn assert_refused(r: &Reply, status: u16, needle: &str, what: &str) {
    let code = r.body["code"].as_i64().or_else(|| r.body["status"].as_i64());
    let expected = if status == 400 { 0 } else { i64::from(status) };
    assert_eq!((r.status, code), (status, Some(expected)), "{what}: {:?}", r.body);
    let msg = r.body["msg"]
        .as_str()
        .or_else(|| r.body["message"].as_str())
        .unwrap_or("");
    assert!(
        msg.contains(needle),
        "{what}: message {msg:?} should mention {needle:?}"
    );
}

#[tokio::test]
async fn oversized_bodies_and_uploads_are_413_and_store_nothing() {
    let app = spawn_with(Store::Filesystem, &[("MAX_UPLOAD_BYTES", "1000")]).await;
    let admin = app.admin_token().await;
    let kb_id = {
        let provider = app.provider(&admin, "p").await;
        let emb = app
            .model(&admin, provider, "EMBEDDING", "emb", "http://127.0.0.1:9/v1", json!({}))
            .await;
        app.post(
            "/rag",
            Some(&admin),
            &json!({ "name": "kb", "embeddingModelId": emb, "dimensionOfVectorModel": 8 }),
        )
        .await
        .assert_ok()["id"]
            .as_i64()
            .unwrap()
    };
    let before = app.snapshot().await;
    let huge = json!({ "name": "x".repeat(3 * 1024 * 1024) }).to_string().into_bytes();
    for (method, path) in [
        ("POST", "/agent"),
        ("POST", "/skill"),
        ("POST", "/ai-model/provider"),
        ("POST", "/memory/search"),
        ("POST", "/document/upload/commit"),
        ("PUT", "/user/password"),
        ("POST", "/mcp-server"),
    ] {
        let r = raw(&app, method, path, &admin, "application/json", huge.clone()).await;
        assert_refused(&r, 413, "exceeds the size limit", &format!("{method} {path}"));
    }
    let r = app
        .preview_documents(&admin, kb_id, &[("big.txt", vec![b'a'; 5000])], None)
        .await;
    assert_refused(&r, 413, "exceeds the limit of 1000 bytes", "document preview");
    app.snapshot().await.assert_unchanged_since(&before, "oversized bodies");
}

#[tokio::test]
async fn malformed_json_wrong_types_and_bad_parameters_name_the_field() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let before = app.snapshot().await;
    let json = "application/json";
    let cases: [(&str, &str, &str, &str, u16, &str); 12] = [
        ("POST", "/agent", json, "{", 400, "request body is not valid JSON"),
        ("POST", "/agent", json, "[1, 2]", 400, "[0]: invalid type"),
        ("POST", "/agent", json, r#"{"name": 5}"#, 400, "name: invalid type"),
        (
            "POST",
            "/agent",
            json,
            r#"{"name": "a", "presetQuestions": "q"}"#,
            400,
            "presetQuestions: invalid type",
        ),
        ("POST", "/agent", "text/plain", r#"{"name": "a"}"#, 400, "must be JSON"),
        ("POST", "/skill", json, r#"{"name": ["a"]}"#, 400, "name: invalid type"),
        ("POST", "/ai-model/provider", json, "\u{0}", 400, "not valid JSON"),
        (
            "POST",
            "/user",
            json,
            r#"{"username": "u1", "password": "password-1", "role": "1"}"#,
            400,
            "role: invalid type",
        ),
        (
            "POST",
            "/mcp-server",
            json,
            r#"{"name": "m", "transportType": 2, "endpoint": {"url": "x"}}"#,
            400,
            "endpoint: invalid type",
        ),
        (
            "POST",
            "/memory/search",
            json,
            r#"{"query": "q", "limit": 99999999999999999999}"#,
            400,
            "limit: invalid",
        ),
        ("GET", "/agent/not-a-number", json, "", 400, "invalid path parameter"),
        (
            "GET",
            "/agent/page?featured=maybe",
            json,
            "",
            400,
            "invalid query parameter",
        ),
    ];
    for (method, path, content_type, body, status, needle) in cases {
        let r = raw(&app, method, path, &admin, content_type, body.as_bytes().to_vec()).await;
        assert_refused(&r, status, needle, &format!("{method} {path} {body}"));
    }
    app.snapshot().await.assert_unchanged_since(&before, "malformed input");
}

/// Paged lists: (path, page parameter, size parameter, where the page sits in the body).
const PAGED: &[(&str, &str, &str)] = &[
    ("/agent/page", "page", "size"),
    ("/rag/page", "page", "size"),
    ("/document/page", "page", "size"),
    ("/chunk/page", "page", "size"),
    ("/store-instance/page", "page", "size"),
    ("/resource/page", "page", "size"),
    ("/user/page/list", "page", "size"),
    ("/app/page", "page", "size"),
    ("/mcp-server/page", "page", "size"),
    ("/skill/page", "page", "size"),
    ("/ai-model/configs", "pageNum", "pageSize"),
    ("/ai-model/usage/user-stats", "pageNum", "pageSize"),
    ("/ai-model/usage/global-stats", "pageNum", "pageSize"),
];

/// `size` and `page` as a list answered them, from either paged shape.
fn paging(r: &Reply) -> (i64, i64) {
    let d = r.body["data"].clone();
    let (page, size) = if d["size"].is_i64() {
        (d["page"].as_i64(), d["size"].as_i64())
    } else {
        (r.body["page"].as_i64(), r.body["size"].as_i64())
    };
    (page.unwrap_or(-1), size.unwrap_or(-1))
}

#[tokio::test]
async fn absurd_page_sizes_are_clamped_and_non_numbers_refused() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    for (path, page, size) in PAGED {
        // decisions.md: size above 100 becomes 100, below 1 the default 10, page below 1 is 1.
        for (query, expected) in [
            (format!("{size}=1000000"), (1, 100)),
            (format!("{size}=0&{page}=-5"), (1, 10)),
            (format!("{size}=-1"), (1, 10)),
            (
                format!("{page}=9223372036854775807&{size}=100"),
                (9_223_372_036_854_775_807, 100),
            ),
        ] {
            let r = app.get(&format!("{path}?{query}"), Some(&admin)).await;
            assert_eq!(r.status, 200, "{path}?{query}: {:?}", r.body);
            assert_eq!(paging(&r), expected, "{path}?{query}: {:?}", r.body);
        }
        for bad in [format!("{size}=99999999999999999999"), format!("{page}=abc")] {
            let r = app.get(&format!("{path}?{bad}"), Some(&admin)).await;
            assert_refused(&r, 400, "invalid query parameter", &format!("{path}?{bad}"));
        }
    }
}

/// Text that breaks SQL built by hand or LIKE patterns that are not escaped.
const SQL_HOSTILE: &[&str] = &[
    "%",
    "_",
    "\\",
    "'",
    "' OR '1'='1",
    "'; DROP TABLE users; --",
    "\" OR 1=1 --",
    "a & b | !c :* <-> ()",
    "$1",
];

#[tokio::test]
async fn sql_metacharacters_in_search_fields_match_literally() {
    let s = api_tests::KbSetup::new(Store::Filesystem, &[]).await;
    let app = &s.app;
    let admin = s.admin.as_str();
    let t = Some(admin);
    // One row per list whose text holds a wildcard, and one that holds none.
    for name in ["100% sure_thing", "plain"] {
        app.post("/agent", t, &json!({ "name": name, "description": name }))
            .await
            .assert_ok();
        app.post(
            "/skill",
            t,
            &json!({ "name": name.replace([' ', '%'], "-"), "description": name }),
        )
        .await
        .assert_status_ok();
        app.post(
            "/mcp-server",
            t,
            &json!({ "name": name, "description": name, "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp" }),
        )
        .await
        .assert_ok();
        app.upload_resource(admin, &format!("{name}.png"), PNG.to_vec(), None)
            .await
            .assert_ok();
        app.post(
            "/app",
            t,
            &json!({ "appId": name.replace([' ', '%'], "-"), "appName": name, "description": name }),
        )
        .await
        .assert_ok();
    }
    let kb = s.kb("kb", json!({})).await;
    let before = app.snapshot().await;
    let searches = [
        "/agent/page?keyword=",
        "/skill/page?keyword=",
        "/mcp-server/page?keyword=",
        "/resource/page?originalName=",
        "/app/page?keyword=",
        "/store-instance/page?keyword=",
        "/user/page/list?email=",
    ];
    let total = |r: &Reply| r.body["total"].as_i64().or_else(|| r.body["data"]["total"].as_i64());
    for base in searches {
        for text in SQL_HOSTILE {
            let q: String = url_encode(text);
            let r = app.get(&format!("{base}{q}"), t).await;
            assert_eq!(r.status, 200, "{base}{text:?}: {:?}", r.body);
            // Only "100% sure_thing" holds `%` or `_`; nothing holds the other strings.
            let expected = if ["%", "_"].contains(text) && !base.starts_with("/store") && !base.starts_with("/user") {
                1
            } else {
                0
            };
            assert_eq!(total(&r), Some(expected), "{base}{text:?}: {:?}", r.body);
        }
    }
    for text in SQL_HOSTILE {
        let r = app.post("/rag/search", t, &json!({ "ragId": kb, "query": text })).await;
        assert_eq!(r.assert_ok()["results"], json!([]), "rag search {text:?}");
        let r = app.post("/memory/search", t, &json!({ "query": text })).await;
        assert_eq!(r.assert_ok(), &json!([]), "memory search {text:?}");
    }
    app.snapshot().await.assert_unchanged_since(&before, "hostile searches");
    assert_eq!(app.count("users").await, 1);
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn path_traversal_in_file_names_and_skill_paths_stays_inside_the_store() {
    let s = api_tests::KbSetup::new(Store::Filesystem, &[]).await;
    let app = &s.app;
    let admin = s.admin.as_str();
    let t = Some(admin);
    let skill = app
        .post("/skill", t, &json!({ "name": "paths", "description": "d" }))
        .await
        .assert_status_ok()["id"]
        .as_i64()
        .unwrap();
    let before = app.snapshot().await;
    // Skill paths the skill suite does not try yet: backslashes, drive letters, NUL, and
    // '..' hidden behind percent-encoding (decoded once by the query parser).
    for (path, needle) in [
        ("..%5Cx.md", "path"),
        ("C:%2Fx.md", "path"),
        ("a%00b.md", "path"),
        ("%2E%2E%2Fx.md", "contains '..'"),
        ("scripts%2F..%2F..%2Fx.md", "contains '..'"),
    ] {
        let r = app
            .put(
                &format!("/skill/{skill}/files/content?path={path}"),
                t,
                &json!({ "content": "x" }),
            )
            .await;
        assert_refused(&r, 400, needle, &format!("skill path {path}"));
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "hostile skill paths");

    // Uploaded file names are data, never storage paths: the object lands under the store's
    // own key, and the name is kept (or cut to its last segment) for display only.
    let outside = app.storage_dir.path().parent().unwrap().join("evil.png");
    let kb = s.kb("kb", json!({})).await;
    for name in ["../../evil.png", "..\\..\\evil.png", "/etc/evil.png"] {
        let r = app.upload_resource(admin, name, PNG.to_vec(), None).await;
        let data = r.assert_ok();
        let stored = data["originalName"].as_str().unwrap();
        assert!(!stored.contains(".."), "resource name {name:?} kept as {stored:?}");
        let key: String = sqlx::query_scalar("SELECT storage_key FROM resources WHERE id = $1")
            .bind(data["id"].as_i64().unwrap())
            .fetch_one(&app.db)
            .await
            .unwrap();
        assert!(!key.contains("..") && !key.contains('\\'), "storage key {key:?}");
        let preview = app
            .preview_documents(
                admin,
                kb,
                &[(name.replace("png", "txt").as_str(), b"hello".to_vec())],
                None,
            )
            .await;
        let items = preview.assert_ok()["items"].clone();
        let shown = items[0]["name"].as_str().unwrap_or_default().to_owned();
        assert!(!shown.contains(".."), "document name {name:?} kept as {shown:?}");
    }
    assert!(!outside.exists(), "a file was written outside the store");
    let files = app.snapshot().await.files;
    assert!(files.keys().all(|k| !k.contains("..")), "{files:?}");
}

#[tokio::test]
async fn header_injection_in_mcp_api_key_headers_is_refused() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let before = app.snapshot().await;
    let server = |key: Value, value: Value| {
        json!({ "name": "m", "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp", "authType": 1,
                "authConfig": { "key": key, "value": value } })
    };
    // Line breaks and invalid names are covered in the MCP suite; these are the other ways
    // to smuggle a second header or split the request.
    for (body, needle) in [
        (
            server(json!("X-Key\r\nHost: evil"), json!("v")),
            "authConfig.key must be a valid HTTP header name",
        ),
        (
            server(json!("X-Key:"), json!("v")),
            "authConfig.key must be a valid HTTP header name",
        ),
        (server(json!(""), json!("v")), "authConfig.key"),
        (
            server(json!("X-Key"), json!("v\r\nX-Admin: 1")),
            "authConfig.value must be a valid HTTP header value",
        ),
        // A NUL is refused for every JSON field before any module sees it.
        (
            server(json!("X-Key"), json!("v\u{0}")),
            "authConfig.value: must not contain NUL characters",
        ),
        (server(json!("Host"), json!("evil")), "authConfig.key must not be host"),
    ] {
        let r = app.post("/mcp-server", Some(&admin), &body).await;
        assert_refused(&r, 400, needle, &body.to_string());
    }
    app.snapshot().await.assert_unchanged_since(&before, "header injection");
}

/// A workbook whose one sheet is `sheet_data` and whose shared string table is `strings`.
fn workbook(sheet_data: &str, strings: &str) -> Vec<u8> {
    use shared::rag::parse::fixtures;
    const MAIN: &str = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
    let base = fixtures::xlsx(&[("Sheet", vec![vec!["Name".to_owned()], vec!["x".to_owned()]])]);
    let sheet = format!(r#"<worksheet xmlns="{MAIN}"><sheetData>{sheet_data}</sheetData></worksheet>"#);
    let base = fixtures::with_zip_entry(&base, "xl/worksheets/sheet1.xml", sheet.as_bytes());
    let strings = format!(r#"<sst xmlns="{MAIN}" {strings}</sst>"#);
    fixtures::with_zip_entry(&base, "xl/sharedStrings.xml", strings.as_bytes())
}

#[tokio::test]
async fn hostile_workbooks_fail_their_document_and_the_server_keeps_answering() {
    let s = api_tests::KbSetup::new(Store::Filesystem, &[]).await;
    let kb = s.kb("Sheets", json!({})).await;
    // Two cells at opposite corners: read as a range, 17 billion cells, and the process aborted.
    let corners = workbook(
        r#"<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="1048576"><c r="A1048576" t="s"><v>1</v></c><c r="XFD1048576"><v>7</v></c></row>"#,
        r#"uniqueCount="2"><si><t>Name</t></si><si><t>Ann</t></si>"#,
    );
    // A shared string table claiming a hundred billion entries: calamine reserved room for them.
    let claims = workbook(
        r#"<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="2"><c r="A2" t="s"><v>1</v></c></row>"#,
        r#"uniqueCount="100000000000"><si><t>Name</t></si><si><t>Ann</t></si>"#,
    );
    assert!(corners.len() < 4096 && claims.len() < 4096, "small files");
    let reply = s
        .upload(kb, &[("corners.xlsx", corners), ("claims.xlsx", claims)])
        .await;
    let ids: Vec<i64> = reply.assert_ok()["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["id"].as_i64())
        .collect();
    assert_eq!(ids.len(), 2, "{:?}", reply.body);

    let corners = s.settled(ids[0]).await;
    assert_eq!(corners["status"], "success", "{corners}");
    let text = s.chunk_texts(ids[0]).await.concat();
    assert!(text.contains("Name: Ann; column 16384: 7"), "{text}");

    let claims = s.settled(ids[1]).await;
    assert_eq!(
        (claims["status"].as_str(), claims["errorStage"].as_str()),
        (Some("failed"), Some("parsing")),
        "{claims}"
    );
    let msg = claims["errorMessage"].as_str().unwrap_or_default();
    assert!(msg.contains("more than 2000000 shared strings"), "{msg}");
    assert!(s.chunk_texts(ids[1]).await.is_empty());

    // Still serving.
    s.app.get(&format!("/rag/{kb}"), Some(&s.admin)).await.assert_ok();
}

#[tokio::test]
async fn non_ascii_mcp_tokens_are_refused_and_the_server_keeps_answering() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let before = app.snapshot().await;
    // Byte 7 of each falls inside a multi-byte character: the `Bearer ` prefix check sliced
    // there and panicked, which in a release build aborted the process.
    for token in ["bearerétoken", "beare€x-token", "abc🔑defgh"] {
        let body = json!({ "name": "m", "transportType": 2, "endpoint": "http://127.0.0.1:9/mcp",
                           "authType": 2, "authConfig": { "token": token } });
        let r = app.post("/mcp-server", Some(&admin), &body).await;
        assert_refused(&r, 400, "authConfig.token must be visible ASCII", token);
    }
    app.snapshot().await.assert_unchanged_since(&before, "non-ASCII tokens");
    let r = app.get("/agent/page", Some(&admin)).await;
    assert_eq!(r.status, 200, "still serving: {:?}", r.body);
}

#[tokio::test]
async fn knowledge_base_dimensions_past_what_pgvector_indexes_are_400_and_write_nothing() {
    let app = api_tests::spawn(Store::Filesystem).await;
    let admin = app.admin_token().await;
    let provider = app.provider(&admin, "p").await;
    let emb = app
        .model(&admin, provider, "EMBEDDING", "emb", "http://127.0.0.1:9/v1", json!({}))
        .await;
    let kb = app
        .post(
            "/rag",
            Some(&admin),
            &json!({ "name": "kb", "embeddingModelId": emb, "dimensionOfVectorModel": 8 }),
        )
        .await
        .assert_ok()["id"]
        .as_i64()
        .unwrap();
    let before = app.snapshot().await;
    // 4001 failed the index creation with a 500; 4294967297 wrapped to 1 on update.
    for dimension in [json!(4001), json!(16000), json!(0), json!(-5), json!(4_294_967_297_i64)] {
        let body = json!({ "name": "big", "embeddingModelId": emb, "dimensionOfVectorModel": dimension });
        let r = app.post("/rag", Some(&admin), &body).await;
        assert_refused(
            &r,
            400,
            "dimensionOfVectorModel must be between 1 and 4000",
            &format!("create {dimension}"),
        );
        let body = json!({ "dimensionOfVectorModel": dimension });
        let r = app.put(&format!("/rag/{kb}"), Some(&admin), &body).await;
        assert_refused(
            &r,
            400,
            "dimensionOfVectorModel must be between 1 and 4000",
            &format!("update {dimension}"),
        );
    }
    app.snapshot().await.assert_unchanged_since(&before, "bad dimensions");
    let r = app.get(&format!("/rag/{kb}"), Some(&admin)).await;
    assert_eq!(r.assert_ok()["dimensionOfVectorModel"], 8);
}

/// Free-text fields that are stored have a length limit of their own, well under the body's:
/// past it each is refused by name and nothing changes.
#[tokio::test]
async fn overlong_stored_fields_are_refused_by_name_and_change_nothing() {
    let s = api_tests::KbSetup::new(Store::Filesystem, &[]).await;
    let app = &s.app;
    let t = Some(s.admin.as_str());
    let kb = s.kb("Long", json!({})).await;
    let provider = app.provider(&s.admin, "long").await;
    let creds = app.create_app(&s.admin, "long-app").await;
    let long = "x".repeat(2049);
    let labels: serde_json::Map<String, Value> = [("zone".to_owned(), json!("y".repeat(501)))].into_iter().collect();
    let before = app.snapshot().await;
    let admin_cases = [
        (
            "POST",
            "/rag".to_owned(),
            json!({ "name": "n", "embeddingModelId": s.embedding_model, "description": long }),
            "description",
        ),
        ("PUT", format!("/rag/{kb}"), json!({ "icon": long }), "icon"),
        (
            "POST",
            "/ai-model/provider".to_owned(),
            json!({ "providerName": "p", "providerKey": "p2", "iconUrl": long }),
            "iconUrl",
        ),
        (
            "PUT",
            format!("/ai-model/provider/{provider}"),
            json!({ "description": long }),
            "description",
        ),
        (
            "PUT",
            format!("/ai-model/config/{}", s.embedding_model),
            json!({ "description": long }),
            "description",
        ),
    ];
    for (method, path, body, field) in admin_cases {
        let reply = match method {
            "POST" => app.post(&path, t, &body).await,
            _ => app.put(&path, t, &body).await,
        };
        assert_eq!(reply.status, 400, "{method} {path}: {:?}", reply.body);
        let msg = reply.body["msg"]
            .as_str()
            .or(reply.body["message"].as_str())
            .unwrap_or_default();
        assert!(msg.contains(field), "{method} {path}: {msg}");
    }
    let big_extra: serde_json::Map<String, Value> = [("notes".to_owned(), json!("z".repeat(17 * 1024)))]
        .into_iter()
        .collect();
    app.ext_post(&creds, "/user/register", &json!({ "openId": "o", "extra": big_extra }))
        .await
        .assert_error(400, 0, "extra must be at most");
    app.ext_post(
        &creds,
        "/node/heartbeat",
        &json!({ "hostId": "h", "hostIp": "10.0.0.7", "grpcPort": 9090, "labels": labels }),
    )
    .await
    .assert_error(400, 0, "labels.zone");
    app.snapshot().await.assert_unchanged_since(&before, "overlong fields");
}
