//! The node's settings: each from `--kebab-name value` on the command line, else from the
//! environment variable of the same name in SCREAMING_SNAKE case.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{anyhow, bail, Context};

pub struct Config {
    /// The platform's API base, e.g. `https://platform.example/api`.
    pub platform_url: String,
    pub app_id: String,
    pub app_token: String,
    pub host_id: String,
    /// The address the platform reaches this node on (reported as hostIp).
    pub host_ip: String,
    pub grpc_listen: SocketAddr,
    pub max_concurrent: usize,
    /// The OpenAI-compatible endpoint model calls go to. Required: the platform names no
    /// endpoint (a model config's URL is user input, and this node's key must not follow it).
    pub upstream_url: String,
    pub upstream_api_key: String,
    /// Replaces the model the platform asks for; empty: that model.
    pub upstream_model: Option<String>,
    pub labels: BTreeMap<String, String>,
}

pub const USAGE: &str = "client-node: serves an app's model calls for the agent platform over gRPC.
Settings (flag or environment variable):
  --platform-url     PLATFORM_URL      the platform API base, e.g. https://platform.example/api (required)
  --app-id           APP_ID            the app's appId (required)
  --app-token        APP_TOKEN         the app's token (required)
  --host-id          HOST_ID           this node's id within the app (required)
  --host-ip          HOST_IP           the address the platform reaches this node on (default 127.0.0.1)
  --grpc-listen      GRPC_LISTEN       where to serve gRPC (default 0.0.0.0:50051; port 0 picks one)
  --max-concurrent   MAX_CONCURRENT    calls served at once (default 4)
  --upstream-url     UPSTREAM_URL      OpenAI-compatible base URL this node calls (required)
  --upstream-api-key UPSTREAM_API_KEY  its API key
  --upstream-model   UPSTREAM_MODEL    model to call instead of the one the platform names
  --labels           LABELS            k=v,k=v reported with every heartbeat";

struct Source {
    args: Vec<String>,
}

impl Source {
    fn get(&self, flag: &str) -> Option<String> {
        let wanted = format!("--{flag}");
        let from_args = self
            .args
            .iter()
            .position(|a| a == &wanted)
            .and_then(|i| self.args.get(i + 1).cloned());
        let env_name = flag.replace('-', "_").to_ascii_uppercase();
        from_args
            .or_else(|| std::env::var(env_name).ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn required(&self, flag: &str) -> anyhow::Result<String> {
        self.get(flag).ok_or_else(|| anyhow!("--{flag} is required\n\n{USAGE}"))
    }
}

fn labels(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    text.split(',')
        .filter(|kv| !kv.trim().is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_owned(), v.trim().to_owned())),
            None => bail!("--labels must be k=v pairs separated by commas, not {kv:?}"),
        })
        .collect()
}

impl Config {
    pub fn load(args: Vec<String>) -> anyhow::Result<Self> {
        let s = Source { args };
        let max_concurrent = match s.get("max-concurrent") {
            Some(v) => v
                .parse()
                .ok()
                .filter(|n| (1..=10_000).contains(n))
                .ok_or_else(|| anyhow!("--max-concurrent must be a number from 1 to 10000"))?,
            None => 4,
        };
        let grpc_listen = s.get("grpc-listen").unwrap_or_else(|| "0.0.0.0:50051".to_owned());
        Ok(Self {
            platform_url: s.required("platform-url")?.trim_end_matches('/').to_owned(),
            app_id: s.required("app-id")?,
            app_token: s.required("app-token")?,
            host_id: s.required("host-id")?,
            host_ip: s.get("host-ip").unwrap_or_else(|| "127.0.0.1".to_owned()),
            grpc_listen: grpc_listen
                .parse()
                .with_context(|| format!("--grpc-listen must be host:port, not {grpc_listen:?}"))?,
            max_concurrent,
            upstream_url: s.get("upstream-url").ok_or_else(|| {
                anyhow!(
                    "--upstream-url (UPSTREAM_URL) is required: the node calls its own model endpoint \
                     with its own UPSTREAM_API_KEY; the platform does not name one\n\n{USAGE}"
                )
            })?,
            upstream_api_key: s.get("upstream-api-key").unwrap_or_default(),
            upstream_model: s.get("upstream-model"),
            labels: labels(&s.get("labels").unwrap_or_default())?,
        })
    }
}
