use api_tests::{spawn, Store, TestApp, ADMIN_PASSWORD, ADMIN_USERNAME};
use serde_json::json;

async fn app() -> TestApp {
    spawn(Store::Filesystem).await
}

#[tokio::test]
async fn login_then_current_user() {
    let app = app().await;
    let login = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let data = login.assert_ok();
    assert!(data["refreshToken"].as_str().is_some_and(|t| t.len() > 20));
    assert!(data.as_object().unwrap().contains_key("email"));
    let token = data["token"].as_str().unwrap();
    let me = app.get("/user", Some(token)).await;
    let me = me.assert_ok();
    assert_eq!(me["username"], ADMIN_USERNAME);
    assert_eq!(me["role"], 1);
    assert_eq!(me["roleName"], "administrator");
    for key in ["id", "email", "tokens", "totals"] {
        assert!(me.get(key).is_some(), "{key} missing from {me}");
    }
    // The optional Bearer prefix works too.
    app.get("/user", Some(&format!("Bearer {token}"))).await.assert_ok();
}

#[tokio::test]
async fn login_failures_are_clear_and_throttled() {
    let app = spawn_with_low_limit().await;
    app.login(ADMIN_USERNAME, "wrong")
        .await
        .assert_error(401, 401, "incorrect");
    app.login("nobody", "wrong").await.assert_error(401, 401, "incorrect");
    app.post("/user/login", None, &json!({ "password": "x" }))
        .await
        .assert_error(400, 0, "username is required");
    // Longer than any account's name: refused before the throttle keys it (a key of kilobytes
    // does not fit their index), and counted nowhere.
    let counters = app.count("login_throttle").await;
    app.post(
        "/user/login",
        None,
        &json!({ "username": "u".repeat(3000), "password": "x" }),
    )
    .await
    .assert_error(400, 0, "username must be");
    assert_eq!(app.count("login_throttle").await, counters);
    app.post("/user/login", None, &json!({ "username": "admin" }))
        .await
        .assert_error(400, 0, "password is required");
    app.post("/user/login", None, &json!({ "username": 5, "password": "x" }))
        .await
        .assert_error(400, 0, "username");
    let raw = app
        .send(
            app.client
                .post(app.url("/user/login"))
                .header("content-type", "application/json")
                .body("{"),
        )
        .await;
    raw.assert_error(400, 0, "not valid JSON");

    // Third failure for this username locks it, even with the right password.
    app.login(ADMIN_USERNAME, "wrong")
        .await
        .assert_error(401, 401, "incorrect");
    app.login(ADMIN_USERNAME, "wrong").await;
    let locked = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    locked.assert_error(429, 429, "too many failed logins");
    assert!(locked.headers.get("retry-after").is_some());
}

/// Every spelling that logs into an account counts against its counters. On a database whose
/// `lower` folds `İ` to `i` (one created with a UTF-8 locale, as on most hosts), `admİn` logs
/// in as `admin`, so it must not get counters of its own.
#[tokio::test]
async fn another_spelling_of_a_locked_account_is_locked_too() {
    let database = api_tests::fresh_unicode_database().await;
    let app = api_tests::spawn_with(
        Store::Filesystem,
        &[("LOGIN_MAX_FAILURES", "3"), ("DATABASE_URL", &database)],
    )
    .await;
    let spelled = ADMIN_USERNAME.replace('i', "İ");
    assert_ne!(spelled, ADMIN_USERNAME);
    for _ in 0..3 {
        app.login(ADMIN_USERNAME, "wrong")
            .await
            .assert_error(401, 401, "incorrect");
    }
    app.login(&spelled, ADMIN_PASSWORD)
        .await
        .assert_error(429, 429, "too many failed logins");
}

async fn spawn_with_low_limit() -> TestApp {
    api_tests::spawn_with(Store::Filesystem, &[("LOGIN_MAX_FAILURES", "3")]).await
}

#[tokio::test]
async fn missing_forged_and_expired_tokens_get_401() {
    let app = app().await;
    app.get("/user", None).await.assert_error(401, 401, "log in");
    app.get("/user", Some("not-a-jwt"))
        .await
        .assert_error(401, 401, "invalid");
    // Signed with another secret.
    let forged = shared::auth::JwtKeys::new(&[3u8; 32], std::time::Duration::from_secs(600))
        .issue_access(1, 1, 0)
        .unwrap();
    app.get("/user", Some(&forged)).await.assert_error(401, 401, "invalid");
    // Signed with the right secret but already expired.
    let expired = api_tests::spawn_with(Store::Filesystem, &[("ACCESS_TOKEN_TTL_SECS", "0")]).await;
    let token = expired.admin_token().await;
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    expired
        .get("/user", Some(&token))
        .await
        .assert_error(401, 401, "expired");
}

#[tokio::test]
async fn refresh_rotates_and_reuse_revokes_the_login() {
    let app = app().await;
    let login = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let first = login.assert_ok()["refreshToken"].as_str().unwrap().to_owned();

    let r1 = app
        .post("/auth/refreshToken", None, &json!({ "refreshToken": first }))
        .await;
    let second = r1.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    assert_ne!(first, second);
    app.get("/user", r1.data()["token"].as_str()).await.assert_ok();

    // Reusing the first token revokes the whole chain, including the fresh second token.
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": first }))
        .await
        .assert_error(401, 401, "already used");
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": second }))
        .await
        .assert_error(401, 401, "revoked");
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": "garbage" }))
        .await
        .assert_error(401, 401, "invalid");
    app.post("/auth/refreshToken", None, &json!({}))
        .await
        .assert_error(400, 0, "refreshToken is required");
}

/// A login ends at LOGIN_MAX_AGE_SECS whatever its refreshes: no refresh token of it expires
/// later. Each refresh gave 14 more days, so a stolen login, refreshed, lasted for good.
#[tokio::test]
async fn a_login_ends_at_its_age_however_often_it_is_refreshed() {
    let app = api_tests::spawn_with(Store::Filesystem, &[("LOGIN_MAX_AGE_SECS", "3600")]).await;
    let login = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let mut token = login.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let ends = || async {
        let (expires, login_ends): (i64, i64) = sqlx::query_as(
            "SELECT extract(epoch FROM expires_at)::bigint, extract(epoch FROM login_expires_at)::bigint
             FROM refresh_tokens WHERE used_at IS NULL",
        )
        .fetch_one(&app.db)
        .await
        .unwrap();
        (expires, login_ends)
    };
    let (expires, login_ends) = ends().await;
    let now = chrono::Utc::now().timestamp();
    assert!((3590..=3610).contains(&(login_ends - now)), "{}", login_ends - now);
    assert_eq!(expires, login_ends, "the token lasts no longer than its login");
    for _ in 0..3 {
        let r = app
            .post("/auth/refreshToken", None, &json!({ "refreshToken": token }))
            .await;
        token = r.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
        assert_eq!(
            ends().await,
            (login_ends, login_ends),
            "a refresh does not lengthen the login"
        );
    }
    // A login made before its end was kept gets one at its next refresh.
    sqlx::query("UPDATE refresh_tokens SET login_expires_at = NULL")
        .execute(&app.db)
        .await
        .unwrap();
    let r = app
        .post("/auth/refreshToken", None, &json!({ "refreshToken": token }))
        .await;
    r.assert_ok();
    let (expires, login_ends) = ends().await;
    // Whole seconds, rounded by the database and cut by the clock here: one more at most.
    let left = login_ends - chrono::Utc::now().timestamp();
    assert!(
        left <= 3601 && expires <= login_ends,
        "{left} s left, token until {expires}, login until {login_ends}"
    );
}

/// A client refreshing in a loop keeps a bounded number of rows: the newest used tokens (whose
/// replay still revokes the login) and the live one.
#[tokio::test]
async fn a_refresh_loop_keeps_a_bounded_number_of_tokens() {
    let app = app().await;
    let login = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let mut used = vec![login.assert_ok()["refreshToken"].as_str().unwrap().to_owned()];
    for _ in 0..40 {
        let r = app
            .post(
                "/auth/refreshToken",
                None,
                &json!({ "refreshToken": used.last().unwrap() }),
            )
            .await;
        used.push(r.assert_ok()["refreshToken"].as_str().unwrap().to_owned());
    }
    let kept = shared::users::repo::KEPT_USED_TOKENS;
    assert_eq!(app.count("refresh_tokens").await, kept + 1);
    // The oldest is forgotten, but still known as this login's: replayed, it revokes the login
    // as a kept one does. Refused as unknown, a thief who refreshed past the kept tokens
    // before the owner did kept the login for good.
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": used[0] }))
        .await
        .assert_error(401, 401, "already used");
    app.post(
        "/auth/refreshToken",
        None,
        &json!({ "refreshToken": used.last().unwrap() }),
    )
    .await
    .assert_error(401, 401, "revoked");
    // Presented again, it answers as revoked, and revokes nothing more.
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": used[0] }))
        .await
        .assert_error(401, 401, "invalid");
}

/// A script logging in again and again keeps a bounded number of logins: the newest ones. The
/// oldest is signed out; the others, and the new one, still refresh.
#[tokio::test]
async fn repeated_logins_keep_the_newest() {
    let app = app().await;
    let first = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let first = first.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let second = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let second = second.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    // Logins made since, each with a token that was refreshed once (a used row and a live one).
    let kept = shared::users::repo::KEPT_LOGINS;
    sqlx::query(
        "INSERT INTO refresh_tokens (family_id, user_id, token_hash, expires_at, used_at)
         SELECT f, 1, md5(f::text || u::text), now() + interval '1 day', CASE WHEN u THEN now() END
         FROM (SELECT gen_random_uuid() AS f FROM generate_series(1, $1 - 2)) fam, (VALUES (true), (false)) v(u)",
    )
    .bind(kept)
    .execute(&app.db)
    .await
    .unwrap();
    let newest = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let newest = newest.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let logins: i64 = sqlx::query_scalar("SELECT count(DISTINCT family_id) FROM refresh_tokens")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(logins, kept);
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": first }))
        .await
        .assert_error(401, 401, "invalid");
    for live in [second, newest] {
        app.post("/auth/refreshToken", None, &json!({ "refreshToken": live }))
            .await
            .assert_ok();
    }
}

#[tokio::test]
async fn admin_creates_lists_and_updates_users() {
    let app = app().await;
    let admin = app.admin_token().await;
    let create = json!({ "username": "alice", "password": "alice-pass-1", "role": 2, "email": "alice@example.com", "totals": 500 });
    app.post("/user", Some(&admin), &create).await.assert_ok();

    let page = app.get("/user/page/list?page=1&size=1", Some(&admin)).await;
    let data = page.assert_ok();
    assert_eq!(
        (data["page"].as_i64(), data["size"].as_i64(), data["total"].as_i64()),
        (Some(1), Some(1), Some(2))
    );
    assert_eq!(data["data"].as_array().unwrap().len(), 1);
    let found = app.get("/user/page/list?email=alice%40example", Some(&admin)).await;
    let users = found.assert_ok()["data"].as_array().unwrap().clone();
    assert_eq!(users.len(), 1);
    let alice = &users[0];
    assert_eq!(
        (
            alice["username"].as_str(),
            alice["totals"].as_i64(),
            alice["tokens"].as_i64()
        ),
        (Some("alice"), Some(500), Some(500))
    );
    assert!(alice["createDt"].as_str().unwrap().len() == 19, "YYYY-MM-DD HH:mm:ss");
    let id = alice["id"].as_i64().unwrap();

    // Duplicate username (any case) is refused and writes nothing.
    let before = app.count("users").await;
    let dup = json!({ "username": "ALICE", "password": "another-pass", "role": 2 });
    app.post("/user", Some(&admin), &dup)
        .await
        .assert_error(400, 0, "username is already taken");
    let dup_email =
        json!({ "username": "alice2", "password": "another-pass", "role": 2, "email": "Alice@Example.com" });
    app.post("/user", Some(&admin), &dup_email)
        .await
        .assert_error(400, 0, "email is already used");
    assert_eq!(app.count("users").await, before);

    for (body, needle) in [
        (json!({ "password": "abcdefgh", "role": 2 }), "username is required"),
        (json!({ "username": "bob", "role": 2 }), "password is required"),
        (
            json!({ "username": "bob", "password": "short", "role": 2 }),
            "password must be 8 to 128",
        ),
        (
            json!({ "username": "bob", "password": "        ", "role": 2 }),
            "password must not be only spaces",
        ),
        (
            json!({ "username": "bob.smith", "password": "Bob.Smith", "role": 2 }),
            "password must not be the username",
        ),
        (json!({ "username": "bob", "password": "abcdefgh" }), "role is required"),
        (
            json!({ "username": "bob", "password": "abcdefgh", "role": 7 }),
            "role must be 1",
        ),
        (
            json!({ "username": "bob", "password": "abcdefgh", "role": 2, "email": "nope" }),
            "email must be a valid",
        ),
        (
            json!({ "username": "b o b", "password": "abcdefgh", "role": 2 }),
            "username may contain",
        ),
        (
            json!({ "username": "bob", "password": "abcdefgh", "role": "x" }),
            "role: invalid type",
        ),
    ] {
        app.post("/user", Some(&admin), &body)
            .await
            .assert_error(400, 0, needle);
    }
    assert_eq!(app.count("users").await, before);

    // Update: role, email, password.
    let upd = json!({ "role": 1, "email": "alice@new.example", "password": "alice-pass-2" });
    app.put(&format!("/user/{id}"), Some(&admin), &upd).await.assert_ok();
    let login = app.login("alice", "alice-pass-2").await;
    let token = login.assert_ok()["token"].as_str().unwrap().to_owned();
    let me = app.get("/user", Some(&token)).await;
    assert_eq!(
        (me.data()["role"].as_i64(), me.data()["email"].as_str()),
        (Some(1), Some("alice@new.example"))
    );
    // An absent email stays; null or an emptied field removes it.
    let email_of = |token: String| {
        let app = &app;
        async move { app.get("/user", Some(&token)).await.data()["email"].clone() }
    };
    app.put(&format!("/user/{id}"), Some(&admin), &json!({ "role": 1 }))
        .await
        .assert_ok();
    assert_eq!(email_of(token.clone()).await, "alice@new.example");
    for cleared in [json!(null), json!("")] {
        app.put(
            &format!("/user/{id}"),
            Some(&admin),
            &json!({ "role": 1, "email": "a@b.cc" }),
        )
        .await
        .assert_ok();
        app.put(
            &format!("/user/{id}"),
            Some(&admin),
            &json!({ "role": 1, "email": cleared }),
        )
        .await
        .assert_ok();
        assert_eq!(email_of(token.clone()).await, json!(null), "{cleared}");
    }
    app.put(
        &format!("/user/{id}"),
        Some(&admin),
        &json!({ "role": 1, "email": "not-an-email" }),
    )
    .await
    .assert_error(400, 0, "email");
    assert_eq!(
        email_of(token.clone()).await,
        json!(null),
        "a refused edit changes nothing"
    );
    app.put(&format!("/user/{id}"), Some(&admin), &json!({ "email": "x@y.zz" }))
        .await
        .assert_error(400, 0, "role is required");
    app.put("/user/999999", Some(&admin), &json!({ "role": 2 }))
        .await
        .assert_error(404, 404, "user not found");
    app.put("/user/abc", Some(&admin), &json!({ "role": 2 }))
        .await
        .assert_error(400, 0, "invalid path parameter");

    // Role endpoint and password reset.
    app.put(&format!("/user/{id}/role?role=2"), Some(&admin), &json!({}))
        .await
        .assert_ok();
    app.put(&format!("/user/{id}/role"), Some(&admin), &json!({}))
        .await
        .assert_error(400, 0, "role is required");
    app.put(&format!("/user/{id}/role?role=x"), Some(&admin), &json!({}))
        .await
        .assert_error(400, 0, "role");
    app.put(
        &format!("/user/{id}/password"),
        Some(&admin),
        &json!({ "password": "reset-pass-1" }),
    )
    .await
    .assert_ok();
    app.login("alice", "reset-pass-1").await.assert_ok();
    app.put(&format!("/user/{id}/password"), Some(&admin), &json!({}))
        .await
        .assert_error(400, 0, "password is required");
    // An administrator may not set a password to the account's username either, by either
    // route, and a refusal changes nothing; a blank one is a 400 even for an unknown user.
    sqlx::query("UPDATE users SET username = 'alice-smith' WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    let before = app.snapshot().await;
    for path in [format!("/user/{id}/password"), format!("/user/{id}")] {
        app.put(&path, Some(&admin), &json!({ "role": 2, "password": "Alice-Smith" }))
            .await
            .assert_error(400, 0, "password must not be the username");
    }
    app.snapshot()
        .await
        .assert_unchanged_since(&before, "passwords equal to the username");
    sqlx::query("UPDATE users SET username = 'alice' WHERE id = $1")
        .bind(id)
        .execute(&app.db)
        .await
        .unwrap();
    for (password, status, needle) in [
        ("        ", 400, "password must not be only spaces"),
        ("reset-pass-1", 404, "not found"),
    ] {
        let code = if status == 404 { 404 } else { 0 };
        app.put("/user/424242/password", Some(&admin), &json!({ "password": password }))
            .await
            .assert_error(status, code, needle);
    }
}

#[tokio::test]
async fn the_last_administrator_cannot_be_demoted() {
    let app = app().await;
    let admin = app.admin_token().await;
    let me = app.get("/user", Some(&admin)).await;
    let id = me.assert_ok()["id"].as_i64().unwrap();
    app.put(&format!("/user/{id}/role?role=2"), Some(&admin), &json!({}))
        .await
        .assert_error(400, 0, "last administrator");
    let still = app.get("/user", Some(&admin)).await;
    assert_eq!(still.data()["role"], 1);
}

#[tokio::test]
async fn regular_users_get_403_on_admin_endpoints() {
    let app = app().await;
    let (id, token) = app.regular_user("carol").await;
    let t = Some(token.as_str());
    app.get("/user/page/list", t)
        .await
        .assert_error(403, 403, "administrator");
    app.post(
        "/user",
        t,
        &json!({ "username": "x1", "password": "abcdefgh", "role": 1 }),
    )
    .await
    .assert_error(403, 403, "administrator");
    app.put(&format!("/user/{id}"), t, &json!({ "role": 1 }))
        .await
        .assert_error(403, 403, "administrator");
    app.put(&format!("/user/{id}/role?role=1"), t, &json!({}))
        .await
        .assert_error(403, 403, "administrator");
    app.put(&format!("/user/{id}/password"), t, &json!({ "password": "abcdefghi" }))
        .await
        .assert_error(403, 403, "administrator");
    app.post(
        "/user/authorize/code",
        t,
        &json!({ "email": "a@b.cd", "days": 1, "totals": 1 }),
    )
    .await
    .assert_error(403, 403, "administrator");
    let me = app.get("/user", t).await;
    assert_eq!(me.assert_ok()["role"], 2);
    assert_eq!(app.count("users").await, 2);
}

#[tokio::test]
async fn own_password_change() {
    let app = app().await;
    let (_, token) = app.regular_user("dave").await;
    let t = Some(token.as_str());
    let wrong = json!({ "oldPassword": "not-it", "newPassword": "new-pass-123" });
    app.put("/user/password", t, &wrong)
        .await
        .assert_error(400, 0, "oldPassword is incorrect");
    app.login("dave", "user-password-1").await.assert_ok();
    app.put("/user/password", t, &json!({ "oldPassword": "user-password-1" }))
        .await
        .assert_error(400, 0, "newPassword is required");
    app.put(
        "/user/password",
        t,
        &json!({ "oldPassword": "user-password-1", "newPassword": "short" }),
    )
    .await
    .assert_error(400, 0, "newPassword must be");
    app.put(
        "/user/password",
        t,
        &json!({ "oldPassword": "user-password-1", "newPassword": "new-pass-123" }),
    )
    .await
    .assert_ok();
    app.login("dave", "user-password-1")
        .await
        .assert_error(401, 401, "incorrect");
    app.login("dave", "new-pass-123").await.assert_ok();
    app.put("/user/password", None, &json!({}))
        .await
        .assert_error(401, 401, "log in");
}

/// Guessing the old password with someone's session is throttled like logins: after
/// LOGIN_MAX_FAILURES (5) wrong guesses the change is locked, the right password included.
#[tokio::test]
async fn old_password_guesses_are_throttled() {
    let app = app().await;
    let (_, token) = app.regular_user("erin").await;
    let t = Some(token.as_str());
    let guess = |old: &str| json!({ "oldPassword": old, "newPassword": "new-pass-123" });
    for i in 0..5 {
        app.put("/user/password", t, &guess(&format!("guess-{i}")))
            .await
            .assert_error(400, 0, "oldPassword is incorrect");
    }
    app.put("/user/password", t, &guess("guess-5"))
        .await
        .assert_error(429, 429, "");
    app.put("/user/password", t, &guess("user-password-1"))
        .await
        .assert_error(429, 429, "");
    app.login("erin", "user-password-1").await.assert_ok();
}

#[tokio::test]
async fn authorize_code_grants_quota() {
    let app = app().await;
    let admin = app.admin_token().await;
    let t = Some(admin.as_str());
    let (_, _) = app.regular_user("erin").await;
    let grant = json!({ "email": "erin@example.com", "days": 30, "totals": 1000 });
    app.post("/user/authorize/code", t, &grant).await.assert_ok();
    app.post("/user/authorize/code", t, &grant).await.assert_ok();
    let list = app.get("/user/page/list?email=erin", t).await;
    let erin = list.assert_ok()["data"][0].clone();
    assert_eq!(
        (erin["tokens"].as_i64(), erin["totals"].as_i64()),
        (Some(2000), Some(2000))
    );
    assert!(erin["expireDt"].as_str().is_some());

    // An unknown email becomes a regular user with that quota.
    let before = app.count("users").await;
    app.post(
        "/user/authorize/code",
        t,
        &json!({ "email": "new@example.com", "days": 7, "totals": 50 }),
    )
    .await
    .assert_ok();
    assert_eq!(app.count("users").await, before + 1);
    let list = app.get("/user/page/list?email=new%40example.com", t).await;
    let new = list.assert_ok()["data"][0].clone();
    assert_eq!(
        (new["role"].as_i64(), new["tokens"].as_i64(), new["username"].as_str()),
        (Some(2), Some(50), Some("new@example.com"))
    );

    for (body, needle) in [
        (json!({ "days": 7, "totals": 50 }), "email is required"),
        (
            json!({ "email": "bad", "days": 7, "totals": 50 }),
            "email must be a valid",
        ),
        (json!({ "email": "z@example.com", "totals": 50 }), "days is required"),
        (
            json!({ "email": "z@example.com", "days": 0, "totals": 50 }),
            "days must be between",
        ),
        (json!({ "email": "z@example.com", "days": 7 }), "totals is required"),
        (
            json!({ "email": "z@example.com", "days": 7, "totals": -5 }),
            "totals must be between",
        ),
    ] {
        app.post("/user/authorize/code", t, &body)
            .await
            .assert_error(400, 0, needle);
    }
    assert_eq!(app.count("users").await, before + 1);

    // An unknown email that is someone else's username is refused, naming the email.
    let bob = json!({ "username": "bob@example.com", "password": "password-1", "role": 2 });
    app.post("/user", t, &bob).await.assert_ok();
    let to_bob = json!({ "email": "bob@example.com", "days": 7, "totals": 50 });
    app.post("/user/authorize/code", t, &to_bob).await.assert_error(
        400,
        0,
        "email: no user has the email bob@example.com, and the username",
    );
    let bob_totals: i64 = sqlx::query_scalar("SELECT totals FROM users WHERE username = 'bob@example.com'")
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(bob_totals, 0);

    // Two grants to a new email at once both count. The test's table lock holds both at their
    // insert, after each has looked the email up, unless grants to one email take turns.
    let mut writes = app.db.begin().await.unwrap();
    sqlx::query("LOCK TABLE users IN SHARE MODE")
        .execute(&mut *writes)
        .await
        .unwrap();
    let twice = json!({ "email": "twice@example.com", "days": 7, "totals": 50 });
    let release = async {
        api_tests::until_statements_wait_for_locks(&app.db, 2).await;
        writes.commit().await.unwrap();
    };
    let (first, second, ()) = tokio::join!(
        app.post("/user/authorize/code", t, &twice),
        app.post("/user/authorize/code", t, &twice),
        release
    );
    first.assert_ok();
    second.assert_ok();
    let twice_tokens: Vec<i64> = sqlx::query_scalar("SELECT tokens FROM users WHERE email = 'twice@example.com'")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(twice_tokens, vec![100]);

    // Grants add up to the largest quota and no further: the one that would pass it changes
    // nothing.
    let max = shared::users::service::MAX_TOKENS;
    let big = json!({ "email": "erin@example.com", "days": 30, "totals": max - 2000 });
    app.post("/user/authorize/code", t, &big).await.assert_ok();
    app.post("/user/authorize/code", t, &grant).await.assert_error(
        400,
        0,
        "totals: the user's quota would pass the largest one",
    );
    let list = app.get("/user/page/list?email=erin", t).await;
    let erin = list.assert_ok()["data"][0].clone();
    assert_eq!(
        (erin["tokens"].as_i64(), erin["totals"].as_i64()),
        (Some(max), Some(max))
    );
}

#[tokio::test]
async fn secrets_are_never_stored_in_plain_text() {
    let app = app().await;
    let login = app.login(ADMIN_USERNAME, ADMIN_PASSWORD).await;
    let refresh = login.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let hash: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE username = $1")
        .bind(ADMIN_USERNAME)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$") && !hash.contains(ADMIN_PASSWORD));
    let stored: Vec<String> = sqlx::query_scalar("SELECT token_hash FROM refresh_tokens")
        .fetch_all(&app.db)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].contains(&refresh) && stored[0].len() == 64);
}

/// Logs in with `X-Forwarded-For: address`.
async fn login_from(app: &TestApp, address: &str, username: &str, password: &str) -> api_tests::Reply {
    let body = json!({ "username": username, "password": password });
    app.send(
        app.client
            .post(app.url("/user/login"))
            .header("x-forwarded-for", address)
            .json(&body),
    )
    .await
}

/// 25 wrong passwords at once, each claiming another address: the header is the client's word
/// and counts for nothing without a trusted proxy, and counting is atomic, so exactly
/// LOGIN_MAX_FAILURES (5) are checked and the other 20 refused.
#[tokio::test]
async fn concurrent_failures_with_forged_addresses_are_throttled_exactly() {
    let app = app().await;
    let addresses: Vec<String> = (0..25).map(|i| format!("203.0.113.{i}")).collect();
    let attempts = addresses.iter().map(|a| login_from(&app, a, ADMIN_USERNAME, "wrong"));
    let replies = futures::future::join_all(attempts).await;
    let unauthorized = replies.iter().filter(|r| r.status == 401).count();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!(
        (unauthorized, refused),
        (5, 20),
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    app.login(ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_error(429, 429, "too many failed logins");
}

/// Behind one trusted proxy: failures from one address lock that address for the account, not
/// the owner elsewhere; failures from many addresses lock the account at the higher bound, but
/// not from an address the owner logged in from before.
#[tokio::test]
async fn someone_elses_failures_do_not_lock_the_owner_out() {
    let app = api_tests::spawn_with(
        Store::Filesystem,
        &[("TRUSTED_PROXY_HOPS", "1"), ("LOGIN_ACCOUNT_MAX_FAILURES", "8")],
    )
    .await;
    login_from(&app, "192.0.2.10", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_ok();
    for _ in 0..5 {
        login_from(&app, "198.51.100.7", ADMIN_USERNAME, "wrong")
            .await
            .assert_error(401, 401, "incorrect");
    }
    login_from(&app, "198.51.100.7", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_error(429, 429, "too many failed logins");
    // A new address is fine until the account-wide bound (8) is used up.
    login_from(&app, "192.0.2.20", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_ok();
    for i in 0..3 {
        login_from(&app, &format!("198.51.100.{}", 20 + i), ADMIN_USERNAME, "wrong")
            .await
            .assert_error(401, 401, "incorrect");
    }
    login_from(&app, "192.0.2.30", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_error(429, 429, "too many failed logins");
    // The addresses the owner logged in from still work.
    login_from(&app, "192.0.2.10", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_ok();
    login_from(&app, "192.0.2.20", ADMIN_USERNAME, ADMIN_PASSWORD)
        .await
        .assert_ok();
}

/// An access token ends with its login: a password change (own or by an administrator) and a
/// revoked refresh family end the access tokens issued before, not only the refresh tokens.
#[tokio::test]
async fn access_tokens_end_with_a_password_change_or_a_revoked_login() {
    let app = app().await;
    let (id, before) = app.regular_user("frank").await;
    let second = app.login("frank", "user-password-1").await;
    let second = second.assert_ok()["token"].as_str().unwrap().to_owned();
    app.put(
        "/user/password",
        Some(&before),
        &json!({ "oldPassword": "user-password-1", "newPassword": "new-pass-123" }),
    )
    .await
    .assert_ok();
    for token in [&before, &second] {
        app.get("/user", Some(token)).await.assert_error(401, 401, "revoked");
    }
    let after = app.login("frank", "new-pass-123").await;
    let after = after.assert_ok()["token"].as_str().unwrap().to_owned();
    app.get("/user", Some(&after)).await.assert_ok();

    // An administrator's reset ends them too.
    let admin = app.admin_token().await;
    app.put(
        &format!("/user/{id}/password"),
        Some(&admin),
        &json!({ "password": "reset-pass-1" }),
    )
    .await
    .assert_ok();
    app.get("/user", Some(&after)).await.assert_error(401, 401, "revoked");

    // A replayed refresh token revokes its login: the access tokens it minted end with it.
    let login = app.login("frank", "reset-pass-1").await;
    let (access, first) = {
        let d = login.assert_ok();
        (
            d["token"].as_str().unwrap().to_owned(),
            d["refreshToken"].as_str().unwrap().to_owned(),
        )
    };
    let rotated = app
        .post("/auth/refreshToken", None, &json!({ "refreshToken": first }))
        .await;
    let rotated = rotated.assert_ok()["token"].as_str().unwrap().to_owned();
    app.get("/user", Some(&rotated)).await.assert_ok();
    app.post("/auth/refreshToken", None, &json!({ "refreshToken": first }))
        .await
        .assert_error(401, 401, "already used");
    for token in [&access, &rotated] {
        app.get("/user", Some(token)).await.assert_error(401, 401, "revoked");
    }
}

/// A password change waits for a refresh that is issuing a token at that moment and revokes
/// that token too. The refresh is played here step by step as `users::service::refresh` takes
/// them (the user's row, then the presented token's, then the new token), held open while the
/// change runs; before, it locked only the presented token, and the change's revoke, waiting on
/// that row, read the tokens from before the new one existed and left it live.
#[tokio::test]
async fn a_password_change_revokes_a_token_issued_while_it_runs() {
    use shared::users::repo;
    let app = app().await;
    let login = app.login("admin", api_tests::ADMIN_PASSWORD).await;
    let presented = login.assert_ok()["refreshToken"].as_str().unwrap().to_owned();
    let token = login.body["data"]["token"].as_str().unwrap().to_owned();
    let hash = shared::auth::refresh::hash(&presented);
    let mut refreshing = app.db.begin().await.unwrap();
    let (owner, _) = repo::refresh_owner(&mut *refreshing, &hash).await.unwrap().unwrap();
    repo::lock_token_version(&mut refreshing, owner).await.unwrap();
    let claimed = repo::claim_refresh(&mut *refreshing, &hash).await.unwrap().unwrap();
    let body = json!({ "oldPassword": api_tests::ADMIN_PASSWORD, "newPassword": "fresh-password-2" });
    let change = app.put("/user/password", Some(&token), &body);
    let issue = async {
        // Until the change waits on a row the refresh holds.
        api_tests::until_a_statement_waits_for_a_lock(&app.db).await;
        let expires = chrono::Utc::now() + chrono::Duration::days(1);
        repo::insert_refresh(
            &mut *refreshing,
            claimed.family_id,
            owner,
            "in-flight",
            (expires, expires),
        )
        .await
        .unwrap();
        refreshing.commit().await.unwrap();
    };
    let (changed, ()) = tokio::join!(change, issue);
    changed.assert_ok();
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM refresh_tokens WHERE user_id = $1 AND revoked_at IS NULL")
        .bind(owner)
        .fetch_one(&app.db)
        .await
        .unwrap();
    assert_eq!(live, 0, "the token issued meanwhile is revoked too");
}

/// Changing one's own password while an administrator's reset is being written (a session
/// taken over, say) does not overwrite the reset with a password the session's holder chose:
/// 409, and the password they chose does not log in.
#[tokio::test]
async fn an_own_password_change_does_not_overwrite_a_reset_made_meanwhile() {
    let app = app().await;
    let (id, token) = app.regular_user("carol").await;
    let mut reset = app.db.begin().await.unwrap();
    sqlx::query("UPDATE users SET token_version = token_version + 1 WHERE id = $1")
        .bind(id)
        .execute(&mut *reset)
        .await
        .unwrap();
    let body = json!({ "oldPassword": "user-password-1", "newPassword": "Chosen-by-a-thief-1" });
    let change = app.put("/user/password", Some(&token), &body);
    let commit = async {
        api_tests::until_a_statement_waits_for_a_lock(&app.db).await;
        reset.commit().await.unwrap();
    };
    let (changed, ()) = tokio::join!(change, commit);
    assert_eq!(changed.status, 409, "{:?}", changed.body);
    assert!(changed.msg().contains("changed meanwhile"), "{:?}", changed.body);
    app.login("carol", "Chosen-by-a-thief-1")
        .await
        .assert_error(401, 401, "incorrect");
}

/// The first administrator is held to every account's rules: a start whose ADMIN_PASSWORD or
/// ADMIN_USERNAME breaks them fails, naming the variable, and creates nobody.
#[tokio::test]
async fn the_first_administrator_is_held_to_the_account_rules() {
    use shared::users::service::ensure_first_admin;
    let app = app().await;
    sqlx::query("DELETE FROM users").execute(&app.db).await.unwrap();
    for (username, password, needle) in [
        ("root", "a", "ADMIN_PASSWORD must be"),
        ("root", "short", "ADMIN_PASSWORD must be"),
        (
            "no spaces",
            "long-enough-1",
            "ADMIN_USERNAME: username may contain only",
        ),
        ("r", "long-enough-1", "ADMIN_USERNAME: username must be"),
    ] {
        let refused = ensure_first_admin(&app.db, Some(username), Some(password))
            .await
            .expect_err(username);
        assert!(refused.to_string().contains(needle), "{refused}");
        assert_eq!(app.count("users").await, 0, "{username}");
    }
    ensure_first_admin(&app.db, Some("root"), Some("long-enough-1"))
        .await
        .unwrap();
    app.login("root", "long-enough-1").await.assert_ok();
}
