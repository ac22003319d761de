//! A headless Chromium driven over WebDriver (chromedriver, installed by
//! `localstack/install.sh chromium`), enough to load a page, type, click and read the DOM.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::free_port;

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
    origin: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Self {
        let port = free_port();
        // Its own process group, so that Chromium goes down with the driver.
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (run `bash localstack/install.sh chromium`)");
        let origin = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http.get(format!("{origin}/status")).send().await;
            if ready.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let caps = json!({ "capabilities": { "alwaysMatch": { "browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     format!("--user-data-dir={}", profile.path().display())]
        } } } });
        let mut browser = Self {
            driver,
            http,
            session: String::new(),
            origin,
            _profile: profile,
        };
        let created = browser.call("POST", "/session", caps).await;
        browser.session = created["sessionId"].as_str().expect("session id").to_owned();
        browser
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}{path}", self.origin);
        let req = match method {
            "POST" => self.http.post(url).json(&body),
            "DELETE" => self.http.delete(url),
            _ => self.http.get(url),
        };
        let reply: Value = req
            .send()
            .await
            .expect("webdriver")
            .json()
            .await
            .expect("webdriver json");
        let value = reply["value"].clone();
        assert!(value.get("error").is_none(), "webdriver {method} {path}: {value}");
        value
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", &self.at("/url"), json!({ "url": url })).await;
    }

    /// Runs a script in the page and returns its result.
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.at("/execute/sync"),
            json!({ "script": script, "args": [] }),
        )
        .await
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .call(
                "POST",
                &self.at("/element"),
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        found[ELEMENT].as_str().expect("element id").to_owned()
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            "POST",
            &self.at(&format!("/element/{id}/value")),
            json!({ "text": text }),
        )
        .await;
    }

    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call("POST", &self.at(&format!("/element/{id}/click")), json!({}))
            .await;
    }

    /// Polls `script` until it returns true (panics after `timeout`).
    pub async fn wait_for(&self, script: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.eval(script).await != Value::Bool(true) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {script}; page: {}",
                self.eval("return document.body.outerHTML").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.driver.wait();
    }
}
