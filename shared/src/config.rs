//! Typed configuration read from the environment (and `.env` for local runs).

use std::time::Duration;

use base64::Engine;

/// Where objects (uploads, skill packages) are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageBackend {
    /// S3 (or LocalStack) in the configured bucket.
    S3 { bucket: String },
    /// A directory on the local filesystem.
    Filesystem { root: String },
}

/// How background work is queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueBackend {
    /// SQS queues, one URL per worker.
    Sqs { ingest_url: String, memory_url: String },
    /// Tokio channels inside the process.
    InProcess,
}

/// No `Debug`: it holds the JWT secret, the encryption key, the database URL's password and
/// the first administrator's password, and a `{:?}` anywhere would print them.
#[derive(Clone)]
pub struct Config {
    pub api_prefix: String,
    pub database_url: String,
    pub db_max_connections: u32,
    pub jwt_secret: Vec<u8>,
    pub encryption_key: [u8; 32],
    pub access_token_ttl: Duration,
    pub refresh_token_ttl: Duration,
    /// How long a login lasts, refreshed or not (`LOGIN_MAX_AGE_SECS`, default 90 days).
    pub login_max_age: Duration,
    pub admin_username: Option<String>,
    pub admin_password: Option<String>,
    pub storage: StorageBackend,
    pub queue: QueueBackend,
    /// Base URL put in front of links the service hands out; relative links when unset.
    pub public_base_url: Option<String>,
    /// Offset of the zone timestamps are rendered in, in seconds east of UTC.
    pub utc_offset_secs: i32,
    pub max_upload_bytes: u64,
    /// The most a file download answers at once (BUFFERED_RESPONSE_MAX_BYTES, unset: no
    /// limit). Behind API Gateway a buffered answer is at most 6 MB, base64 included: the
    /// template sets 4 MiB, and a larger whole file is refused (413 naming byte ranges) before
    /// it is read into a function's memory to fail at the payload limit.
    pub buffered_response_max_bytes: Option<u64>,
    /// Knowledge bases one regular user may own (`KB_MAX_PER_USER`, default 100): each has an
    /// index on the shared chunks table.
    pub kb_max_per_user: i64,
    /// Skills one regular user may create (`SKILL_MAX_PER_USER`, default 200): each is a package
    /// of up to `SKILL_MAX_PACKAGE_BYTES` in the bucket, listed to every user.
    pub skill_max_per_user: i64,
    /// Agents one regular user may create (`AGENT_MAX_PER_USER`, default 200).
    pub agent_max_per_user: i64,
    /// MCP servers one regular user may create (`MCP_MAX_PER_USER`, default 100).
    pub mcp_max_per_user: i64,
    /// Memory configs one regular user may create (`MEMORY_CONFIG_MAX_PER_USER`, default 50):
    /// every user reads every config, and each create asks its embedding model for a vector.
    pub memory_config_max_per_user: i64,
    pub max_presigned_upload_bytes: u64,
    /// Failed logins per account from one address before that pair is locked
    /// (`LOGIN_MAX_FAILURES`, default 5).
    pub login_max_failures: i32,
    /// Failed logins from one address across accounts (`LOGIN_IP_MAX_FAILURES`, default 50).
    pub login_ip_max_failures: i32,
    /// Failed logins per account across all addresses (`LOGIN_ACCOUNT_MAX_FAILURES`, default
    /// 50). Addresses the account logged in from recently are exempt, so an attacker spraying
    /// from many addresses cannot lock the owner out.
    pub login_account_max_failures: i32,
    pub login_lock: Duration,
    /// Proxies in front of the service whose `X-Forwarded-For` entries are believed
    /// (`TRUSTED_PROXY_HOPS`, default 0: the header is ignored and the address is the platform's).
    pub trusted_proxy_hops: usize,
    /// stdio MCP servers run a command on the service's host as the service's user
    /// (`MCP_STDIO_ENABLED`, default false).
    pub mcp_stdio_enabled: bool,
    /// The commands stdio MCP servers may run when enabled (`MCP_STDIO_COMMANDS`, comma-separated;
    /// an entry with a `/` is an exact path, one without a bare command name looked up in PATH).
    pub mcp_stdio_commands: Vec<String>,
    /// How long an ingest worker holds a document without a sign of life (`INGEST_LEASE_SECS`,
    /// default 120); every stage and embedding group renews it, so a killed worker's document
    /// is free again soon, long before the queue redelivers.
    pub ingest_lease: Duration,
    /// Hosts that URL imports may reach even though they resolve to private or loopback
    /// addresses (tests, trusted intranet sources).
    pub import_allow_hosts: Vec<String>,
    /// Networks that model, MCP and OAuth calls may not reach: for every address
    /// (`OUTBOUND_DENY_CIDRS`, default link-local and cloud metadata addresses; `none` for no
    /// limit), and also for addresses regular users configured (`OUTBOUND_USER_DENY_CIDRS`,
    /// default loopback, private and CGNAT networks; `none` for no more than the first).
    pub outbound: crate::outbound::Outbound,
    /// Networks client nodes may be registered in (`CLIENT_NODE_CIDRS`, default private
    /// networks and loopback; `any` for every address `OUTBOUND_DENY_CIDRS` leaves).
    pub node_networks: crate::outbound::NodeNetworks,
    /// Base URL of a Docling-serve compatible converter, used by the `extparse` parse engine.
    pub extparse_url: Option<String>,
    /// Base URL of a SearXNG-compatible JSON search API, used by agents with web search on.
    pub web_search_url: Option<String>,
    /// Sent as a bearer token to the web search API when set.
    pub web_search_api_key: Option<String>,
    pub skill_limits: SkillLimits,
    /// MCP: connecting and initializing a session (MCP_CONNECT_TIMEOUT_SECS, default 30).
    pub mcp_connect_timeout: Duration,
    /// MCP: one tools/list or tools/call (MCP_CALL_TIMEOUT_SECS, default 60).
    pub mcp_call_timeout: Duration,
    /// The longest a chat turn runs, model calls and tools together (CHAT_TURN_TIMEOUT_SECS,
    /// default 840: under the chat functions' 900 s, so a turn is stored before Lambda ends it).
    pub chat_turn_timeout: Duration,
    /// The longest a model config's connectivity test waits, retries included
    /// (MODEL_TEST_TIMEOUT_SECS, default 20: under API Gateway's 29 s, so an endpoint that does
    /// not answer is reported as such instead of as the gateway's 504).
    pub model_test_timeout: Duration,
    /// The longest a document import by URL waits for its download, redirects included
    /// (URL_IMPORT_TIMEOUT_SECS, default 20: under API Gateway's 29 s, so a slow server is
    /// refused with nothing stored instead of answered by the gateway's 504 while the import
    /// goes on, and a client retrying it imports the document twice).
    pub url_import_timeout: Duration,
    /// The longest an MCP server's connection test or tool list waits, its OAuth retry included
    /// (MCP_TEST_TIMEOUT_SECS, default 20: under API Gateway's 29 s, so a silent server is
    /// reported as such, and the test's outcome recorded, instead of the gateway's 504).
    pub mcp_test_timeout: Duration,
    /// The longest the model calls of a route that answers in one piece may take together,
    /// retries included: a skill's AI draft, a memory extraction a client asks for, a
    /// knowledge-base or memory search, a chunk written by hand (BUFFERED_MODEL_TIMEOUT_SECS,
    /// default 25: under API Gateway's 29 s, so the client is told what happened instead of
    /// getting the gateway's 504 while the calls go on and are paid for). A draft past it falls
    /// back as it does for an unusable model; the others fail with nothing written.
    pub buffered_model_timeout: Duration,
    /// The longest a Q&A answer runs (QA_TIMEOUT_SECS, default 280: under the Q&A function's
    /// 300 s, so the stream ends with an error line and the hold is settled before Lambda
    /// ends the process).
    pub qa_timeout: Duration,
    /// MCP: how long a server's tool list is reused (MCP_TOOLS_TTL_SECS, default 60).
    pub mcp_tools_ttl: Duration,
    /// MCP: how long a session unused stays open (MCP_SESSION_IDLE_SECS, default 600).
    pub mcp_session_idle: Duration,
    /// MCP: sessions one server may have open in a process, one per person chatting
    /// (MCP_SESSIONS_PER_SERVER, default 32); past that the longest unused is closed.
    pub mcp_sessions_per_server: usize,
    /// MCP: the most bytes of tool result text handed to a model (MCP_RESULT_MAX_BYTES, default 65536).
    pub mcp_result_max_bytes: usize,
    pub rate_limits: RateLimits,
    /// Completion tokens held from a regular user's quota for one model call that sets no
    /// maxTokens of its own (`QUOTA_COMPLETION_RESERVE_TOKENS`, default 8192); the call is
    /// capped at what was held, so concurrent calls cannot spend past the quota.
    pub quota_completion_reserve: u64,
}

/// Requests per window per caller; 0 turns a limit off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// `RATE_LIMIT_WINDOW_SECS`, default 60.
    pub window_secs: u32,
    /// Per admin-API user, by JWT subject (`RATE_LIMIT_USER_REQUESTS`, default 1200).
    pub per_user: u32,
    /// Per app on the external API, embed tokens included (`RATE_LIMIT_APP_REQUESTS`, default 6000).
    pub per_app: u32,
}

/// What a skill package may hold; anything beyond is refused before it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillLimits {
    /// Size of an uploaded or rebuilt zip (`SKILL_MAX_PACKAGE_BYTES`, default 10 MiB).
    pub max_package_bytes: u64,
    /// Files and directories in a package (`SKILL_MAX_ENTRIES`, default 500).
    pub max_entries: usize,
    /// Unpacked size of all files together (`SKILL_MAX_UNPACKED_BYTES`, default 50 MiB).
    pub max_unpacked_bytes: u64,
    /// Unpacked / packed size of one entry above 64 KiB (`SKILL_MAX_COMPRESSION_RATIO`, default 100).
    pub max_compression_ratio: u64,
    /// One file read or written online, and read for chat (`SKILL_MAX_FILE_BYTES`, default 1 MiB).
    pub max_file_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("configuration error: {0}")]
pub struct ConfigError(String);

/// What the `LOGIN_*_MAX_FAILURES` may be.
const FAILURES_ALLOWED: (u64, u64) = (1, 1_000_000);

impl Config {
    /// Reads the configuration from the process environment, loading `.env` first if present.
    pub fn from_env() -> Result<Self, ConfigError> {
        // A missing .env is the normal case in Lambda; only the variables matter.
        let _ = dotenvy::dotenv();
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// Reads the configuration through `lookup`, so tests can build one without touching the
    /// process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |key: &str| lookup(key).filter(|v| !v.trim().is_empty());
        let required = |key: &str| get(key).ok_or_else(|| ConfigError(format!("{key} must be set")));
        let parse_num = |key: &str, default: u64| -> Result<u64, ConfigError> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| ConfigError(format!("{key} must be a whole number, got {v:?}"))),
            }
        };
        // A value the service cannot run with refused by name: a pool of 0 connections
        // panicked at start without naming it, and 0 failed logins allowed locked everyone out.
        let parse_within = |key: &str, default: u64, (min, max): (u64, u64)| -> Result<u64, ConfigError> {
            let n = parse_num(key, default)?;
            match (min..=max).contains(&n) {
                true => Ok(n),
                false => Err(ConfigError(format!("{key} must be between {min} and {max}, got {n}"))),
            }
        };

        let api_prefix = get("API_PREFIX").unwrap_or_else(|| "api".to_owned());
        let api_prefix = api_prefix.trim_matches('/').to_owned();
        if api_prefix.is_empty() || api_prefix.contains('/') {
            return Err(ConfigError("API_PREFIX must be one path segment, e.g. api".into()));
        }

        let jwt_secret = required("JWT_SECRET")?.into_bytes();
        if jwt_secret.len() < 32 {
            return Err(ConfigError("JWT_SECRET must be at least 32 bytes long".into()));
        }
        let encryption_key = decode_key(&required("ENCRYPTION_KEY")?)?;

        let storage = match get("STORAGE_BACKEND").as_deref().unwrap_or("fs") {
            "s3" => StorageBackend::S3 {
                bucket: required("S3_BUCKET")?,
            },
            "fs" => StorageBackend::Filesystem {
                root: get("STORAGE_DIR").unwrap_or_else(|| ".local/storage".to_owned()),
            },
            other => return Err(ConfigError(format!("STORAGE_BACKEND must be s3 or fs, got {other:?}"))),
        };
        let queue = match get("QUEUE_BACKEND").as_deref().unwrap_or("memory") {
            "sqs" => QueueBackend::Sqs {
                ingest_url: required("SQS_INGEST_QUEUE_URL")?,
                memory_url: required("SQS_MEMORY_QUEUE_URL")?,
            },
            "memory" => QueueBackend::InProcess,
            other => {
                return Err(ConfigError(format!(
                    "QUEUE_BACKEND must be sqs or memory, got {other:?}"
                )))
            }
        };

        Ok(Self {
            api_prefix,
            database_url: required("DATABASE_URL")?,
            db_max_connections: parse_within("DB_MAX_CONNECTIONS", 10, (1, 1000))? as u32,
            jwt_secret,
            encryption_key,
            access_token_ttl: Duration::from_secs(parse_num("ACCESS_TOKEN_TTL_SECS", 2 * 3600)?),
            refresh_token_ttl: Duration::from_secs(parse_num("REFRESH_TOKEN_TTL_SECS", 14 * 86400)?),
            login_max_age: Duration::from_secs(parse_num("LOGIN_MAX_AGE_SECS", 90 * 86400)?),
            admin_username: get("ADMIN_USERNAME"),
            admin_password: get("ADMIN_PASSWORD"),
            storage,
            queue,
            public_base_url: get("PUBLIC_BASE_URL").map(|u| u.trim_end_matches('/').to_owned()),
            utc_offset_secs: parse_offset(get("TIME_ZONE_OFFSET").as_deref().unwrap_or("+00:00"))?,
            max_upload_bytes: parse_num("MAX_UPLOAD_BYTES", 10 * 1024 * 1024)?,
            buffered_response_max_bytes: match get("BUFFERED_RESPONSE_MAX_BYTES") {
                Some(_) => Some(parse_num("BUFFERED_RESPONSE_MAX_BYTES", 0)?.max(1)),
                None => None,
            },
            kb_max_per_user: i64::try_from(parse_num("KB_MAX_PER_USER", 100)?).unwrap_or(i64::MAX),
            skill_max_per_user: i64::try_from(parse_num("SKILL_MAX_PER_USER", 200)?).unwrap_or(i64::MAX),
            agent_max_per_user: i64::try_from(parse_num("AGENT_MAX_PER_USER", 200)?).unwrap_or(i64::MAX),
            mcp_max_per_user: i64::try_from(parse_num("MCP_MAX_PER_USER", 100)?).unwrap_or(i64::MAX),
            memory_config_max_per_user: i64::try_from(parse_num("MEMORY_CONFIG_MAX_PER_USER", 50)?).unwrap_or(i64::MAX),
            max_presigned_upload_bytes: parse_num("MAX_PRESIGNED_UPLOAD_BYTES", 1024 * 1024 * 1024)?,
            login_max_failures: parse_within("LOGIN_MAX_FAILURES", 5, FAILURES_ALLOWED)? as i32,
            login_ip_max_failures: parse_within("LOGIN_IP_MAX_FAILURES", 50, FAILURES_ALLOWED)? as i32,
            login_account_max_failures: parse_within("LOGIN_ACCOUNT_MAX_FAILURES", 50, FAILURES_ALLOWED)? as i32,
            login_lock: Duration::from_secs(parse_num("LOGIN_LOCK_SECS", 900)?),
            trusted_proxy_hops: parse_num("TRUSTED_PROXY_HOPS", 0)?.min(16) as usize,
            mcp_stdio_enabled: parse_bool("MCP_STDIO_ENABLED", get("MCP_STDIO_ENABLED"))?,
            mcp_stdio_commands: get("MCP_STDIO_COMMANDS")
                .map(|v| {
                    v.split(',')
                        .map(|c| c.trim().to_owned())
                        .filter(|c| !c.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            ingest_lease: Duration::from_secs(parse_num("INGEST_LEASE_SECS", 120)?.max(1)),
            import_allow_hosts: get("IMPORT_URL_ALLOW_HOSTS")
                .map(|v| {
                    v.split(',')
                        .map(|h| h.trim().to_ascii_lowercase())
                        .filter(|h| !h.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            outbound: crate::outbound::Outbound::new(
                deny_list(
                    "OUTBOUND_DENY_CIDRS",
                    get("OUTBOUND_DENY_CIDRS"),
                    crate::outbound::DEFAULT_DENY,
                )?,
                &deny_list(
                    "OUTBOUND_USER_DENY_CIDRS",
                    get("OUTBOUND_USER_DENY_CIDRS"),
                    crate::outbound::DEFAULT_USER_DENY,
                )?,
            ),
            node_networks: crate::outbound::NodeNetworks::parse(
                "CLIENT_NODE_CIDRS",
                get("CLIENT_NODE_CIDRS")
                    .as_deref()
                    .unwrap_or(crate::outbound::DEFAULT_NODE_NETWORKS),
            )
            .map_err(ConfigError)?,
            extparse_url: get("EXTPARSE_URL").map(|u| u.trim_end_matches('/').to_owned()),
            web_search_url: get("WEB_SEARCH_URL").map(|u| u.trim_end_matches('/').to_owned()),
            web_search_api_key: get("WEB_SEARCH_API_KEY"),
            skill_limits: SkillLimits {
                max_package_bytes: parse_num("SKILL_MAX_PACKAGE_BYTES", 10 * 1024 * 1024)?,
                max_entries: parse_num("SKILL_MAX_ENTRIES", 500)? as usize,
                max_unpacked_bytes: parse_num("SKILL_MAX_UNPACKED_BYTES", 50 * 1024 * 1024)?,
                max_compression_ratio: parse_num("SKILL_MAX_COMPRESSION_RATIO", 100)?.max(1),
                max_file_bytes: parse_num("SKILL_MAX_FILE_BYTES", 1024 * 1024)?,
            },
            mcp_connect_timeout: Duration::from_secs(parse_num("MCP_CONNECT_TIMEOUT_SECS", 30)?),
            mcp_call_timeout: Duration::from_secs(parse_num("MCP_CALL_TIMEOUT_SECS", 60)?),
            chat_turn_timeout: Duration::from_secs(parse_num("CHAT_TURN_TIMEOUT_SECS", 840)?.max(1)),
            qa_timeout: Duration::from_secs(parse_num("QA_TIMEOUT_SECS", 280)?.max(1)),
            model_test_timeout: Duration::from_secs(parse_num("MODEL_TEST_TIMEOUT_SECS", 20)?.max(1)),
            url_import_timeout: Duration::from_secs(parse_num("URL_IMPORT_TIMEOUT_SECS", 20)?.max(1)),
            mcp_test_timeout: Duration::from_secs(parse_num("MCP_TEST_TIMEOUT_SECS", 20)?.max(1)),
            buffered_model_timeout: Duration::from_secs(parse_num("BUFFERED_MODEL_TIMEOUT_SECS", 25)?.max(1)),
            mcp_tools_ttl: Duration::from_secs(parse_num("MCP_TOOLS_TTL_SECS", 60)?),
            mcp_session_idle: Duration::from_secs(parse_num("MCP_SESSION_IDLE_SECS", 600)?.max(1)),
            mcp_sessions_per_server: parse_num("MCP_SESSIONS_PER_SERVER", 32)?.max(1) as usize,
            mcp_result_max_bytes: parse_num("MCP_RESULT_MAX_BYTES", 64 * 1024)? as usize,
            rate_limits: RateLimits {
                window_secs: parse_num("RATE_LIMIT_WINDOW_SECS", 60)?.clamp(1, 86_400) as u32,
                per_user: parse_num("RATE_LIMIT_USER_REQUESTS", 1200)?.min(u64::from(u32::MAX)) as u32,
                per_app: parse_num("RATE_LIMIT_APP_REQUESTS", 6000)?.min(u64::from(u32::MAX)) as u32,
            },
            quota_completion_reserve: parse_num("QUOTA_COMPLETION_RESERVE_TOKENS", 8192)?.max(1),
        })
    }
}

fn deny_list(key: &str, value: Option<String>, default: &str) -> Result<crate::outbound::DenyList, ConfigError> {
    crate::outbound::DenyList::parse(key, value.as_deref().unwrap_or(default)).map_err(ConfigError)
}

fn parse_bool(key: &str, value: Option<String>) -> Result<bool, ConfigError> {
    match value.as_deref().map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(other) => Err(ConfigError(format!("{key} must be true or false, got {other:?}"))),
    }
}

fn decode_key(value: &str) -> Result<[u8; 32], ConfigError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|_| ConfigError("ENCRYPTION_KEY must be base64".into()))?;
    bytes
        .try_into()
        .map_err(|_| ConfigError("ENCRYPTION_KEY must decode to exactly 32 bytes".into()))
}

/// Parses `+08:00` / `-05:30` / `Z` into seconds east of UTC.
fn parse_offset(value: &str) -> Result<i32, ConfigError> {
    let bad = || ConfigError(format!("TIME_ZONE_OFFSET must look like +08:00, got {value:?}"));
    let v = value.trim();
    if v == "Z" || v == "UTC" {
        return Ok(0);
    }
    let (sign, rest) = match v.split_at_checked(1).ok_or_else(bad)? {
        ("+", rest) => (1, rest),
        ("-", rest) => (-1, rest),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let h: i32 = h.parse().map_err(|_| bad())?;
    let m: i32 = m.parse().map_err(|_| bad())?;
    if !(0..=14).contains(&h) || !(0..60).contains(&m) {
        return Err(bad());
    }
    Ok(sign * (h * 3600 + m * 60))
}

/// A configuration with only the required settings, for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn test_config() -> Config {
    tests::load(&tests::base()).expect("test config")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    pub(super) fn base() -> HashMap<&'static str, String> {
        HashMap::from([
            ("DATABASE_URL", "postgres://x".to_owned()),
            ("JWT_SECRET", "x".repeat(32)),
            (
                "ENCRYPTION_KEY",
                base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
            ),
        ])
    }

    pub(super) fn load(env: &HashMap<&'static str, String>) -> Result<Config, ConfigError> {
        Config::from_lookup(|k| env.get(k).cloned())
    }

    #[test]
    fn defaults_apply() {
        let c = load(&base()).unwrap();
        assert_eq!(c.api_prefix, "api");
        assert_eq!(c.queue, QueueBackend::InProcess);
        assert!(matches!(c.storage, StorageBackend::Filesystem { .. }));
        assert_eq!(c.utc_offset_secs, 0);
    }

    #[test]
    fn errors_name_the_variable() {
        // Config has no Debug (it holds secrets), so the error is taken with `err()`.
        let refused = |env: &HashMap<&'static str, String>| load(env).err().map(|e| e.to_string()).unwrap_or_default();
        let mut env = base();
        env.insert("ENCRYPTION_KEY", "c2hvcnQ=".into());
        assert!(refused(&env).contains("ENCRYPTION_KEY"));
        let mut env = base();
        env.insert("STORAGE_BACKEND", "s3".into());
        assert!(refused(&env).contains("S3_BUCKET"));
        let mut env = base();
        env.remove("DATABASE_URL");
        assert!(refused(&env).contains("DATABASE_URL"));
        for (key, value) in [
            ("DB_MAX_CONNECTIONS", "0"),
            ("DB_MAX_CONNECTIONS", "4294967296"),
            ("LOGIN_MAX_FAILURES", "0"),
            ("LOGIN_IP_MAX_FAILURES", "3000000000"),
            ("LOGIN_ACCOUNT_MAX_FAILURES", "0"),
        ] {
            let mut env = base();
            env.insert(key, value.into());
            assert!(
                refused(&env).contains(&format!("{key} must be between")),
                "{key}={value}"
            );
        }
    }

    #[test]
    fn offsets_parse() {
        assert_eq!(parse_offset("+08:00").unwrap(), 8 * 3600);
        assert_eq!(parse_offset("-05:30").unwrap(), -(5 * 3600 + 1800));
        assert!(parse_offset("8").is_err());
    }
}
