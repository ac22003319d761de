//! App test helpers: creating apps as an administrator and calling the external API with
//! their credentials.

use serde_json::{json, Value};

use crate::{Reply, TestApp};

/// An app's credentials.
#[derive(Debug, Clone)]
pub struct Creds {
    pub id: i64,
    pub app_id: String,
    pub token: String,
}

impl TestApp {
    /// Creates an app as `admin`; returns its numeric id, appId and token.
    pub async fn create_app(&self, admin: &str, app_id: &str) -> Creds {
        let body = json!({ "appId": app_id, "appName": format!("{app_id} app") });
        let data = self.post("/app", Some(admin), &body).await.assert_ok().clone();
        Creds {
            id: data["id"].as_i64().expect("id"),
            app_id: data["appId"].as_str().expect("appId").to_owned(),
            token: data["token"].as_str().expect("token").to_owned(),
        }
    }

    fn with_creds(&self, req: reqwest::RequestBuilder, creds: Option<(&str, &str)>) -> reqwest::RequestBuilder {
        match creds {
            Some((id, token)) => req.header("Svc-App-Id", id).header("Svc-Token", token),
            None => req,
        }
    }

    /// `GET /openapi/v1{path}` with raw credentials (None: no headers).
    pub async fn ext_get_as(&self, creds: Option<(&str, &str)>, path: &str) -> Reply {
        let req = self.client.get(self.url(&format!("/openapi/v1{path}")));
        self.send(self.with_creds(req, creds)).await
    }

    pub async fn ext_post_as(&self, creds: Option<(&str, &str)>, path: &str, body: &Value) -> Reply {
        let req = self.client.post(self.url(&format!("/openapi/v1{path}"))).json(body);
        self.send(self.with_creds(req, creds)).await
    }

    pub async fn ext_delete_as(&self, creds: Option<(&str, &str)>, path: &str) -> Reply {
        let req = self.client.delete(self.url(&format!("/openapi/v1{path}")));
        self.send(self.with_creds(req, creds)).await
    }

    pub async fn ext_get(&self, c: &Creds, path: &str) -> Reply {
        self.ext_get_as(Some((&c.app_id, &c.token)), path).await
    }

    pub async fn ext_post(&self, c: &Creds, path: &str, body: &Value) -> Reply {
        self.ext_post_as(Some((&c.app_id, &c.token)), path, body).await
    }

    pub async fn ext_delete(&self, c: &Creds, path: &str) -> Reply {
        self.ext_delete_as(Some((&c.app_id, &c.token)), path).await
    }

    /// A DELETE carrying a JSON body, which no route of the external API takes.
    pub async fn ext_delete_with_body(&self, c: &Creds, path: &str, body: &Value) -> Reply {
        let req = self.client.delete(self.url(&format!("/openapi/v1{path}"))).json(body);
        self.send(self.with_creds(req, Some((&c.app_id, &c.token)))).await
    }

    /// A node heartbeat for `host_id`.
    pub async fn heartbeat(&self, c: &Creds, host_id: &str) -> Reply {
        let body = json!({ "hostId": host_id, "hostIp": "10.0.0.7", "grpcPort": 9090, "maxConcurrent": 4,
                           "activeChats": 1, "labels": { "zone": "a" } });
        self.ext_post(c, "/node/heartbeat", &body).await
    }
}
