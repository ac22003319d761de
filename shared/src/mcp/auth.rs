//! `authType` + `authConfig`: validation, masking on read, and keeping a stored secret when a
//! client sends its masked form back.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::crypto::{is_masked, mask_secret};
use crate::{AppError, AppResult};

/// One of the four authentication types, with its fields. Serialized (sealed) as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum AuthConfig {
    None,
    /// Type 1: `<key>: <value>` on every request.
    ApiKey {
        key: String,
        value: String,
    },
    /// Type 2: `Authorization: Bearer <token>`.
    Bearer {
        token: String,
    },
    /// Type 3: OAuth 2.0 client credentials.
    #[serde(rename_all = "camelCase")]
    OAuth2 {
        client_id: String,
        client_secret: String,
        token_url: String,
    },
}

impl AuthConfig {
    /// The secret this configuration sends (the API key's value, the token, the client
    /// secret), if any.
    pub fn secret(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::ApiKey { value, .. } => Some(value),
            Self::Bearer { token } => Some(token),
            Self::OAuth2 { client_secret, .. } => Some(client_secret),
        }
    }

    fn token_url(&self) -> Option<&str> {
        match self {
            Self::OAuth2 { token_url, .. } => Some(token_url),
            _ => None,
        }
    }

    /// Whether `self`, the result of an edit of `stored`, still holds the stored secret.
    pub fn keeps_secret_of(&self, stored: &AuthConfig) -> bool {
        self.secret().is_some() && self.secret() == stored.secret()
    }

    /// Whether `self`, the result of an edit of `stored`, is sent to another address than
    /// `stored` was: another `endpoint` (the server's, before and after) or, for OAuth, another
    /// token URL. With `keeps_secret_of`: whether the edit moves the stored secret.
    pub fn points_elsewhere(&self, stored: &AuthConfig, endpoints: (Option<&str>, Option<&str>)) -> bool {
        endpoints.0 != endpoints.1 || self.token_url() != stored.token_url()
    }
}

// Secrets never reach a Debug line: only the type is shown.
impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthConfig(type {})", self.code())
    }
}

/// Headers the transports set themselves; an API-key header may not replace them.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "host",
    "connection",
    "transfer-encoding",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

impl AuthConfig {
    pub fn code(&self) -> i16 {
        match self {
            Self::None => 0,
            Self::ApiKey { .. } => 1,
            Self::Bearer { .. } => 2,
            Self::OAuth2 { .. } => 3,
        }
    }

    /// Validates `authConfig` for `authType`. Secret fields sent back masked take their value
    /// from `stored` (the same type's stored config); any other masked value is refused.
    pub fn parse(auth_type: i64, raw: Option<&Value>, stored: Option<&AuthConfig>) -> AppResult<Self> {
        let obj = match raw {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            Some(_) => return Err(AppError::validation("authConfig must be an object or null")),
        };
        let empty = Map::new();
        let fields = Fields {
            obj: obj.unwrap_or(&empty),
            stored,
        };
        match auth_type {
            0 => {
                if obj.is_some_and(|o| !o.is_empty()) {
                    return Err(AppError::validation("authConfig must be null for authType 0 (none)"));
                }
                Ok(Self::None)
            }
            1 => {
                fields.require(&["key", "value"], "1 (API key header)")?;
                let key = fields.plain("key")?;
                let name = http::HeaderName::from_bytes(key.as_bytes())
                    .map_err(|_| AppError::validation("authConfig.key must be a valid HTTP header name"))?;
                if RESERVED_HEADERS.contains(&name.as_str()) {
                    return Err(AppError::validation(format!(
                        "authConfig.key must not be {}: the transport sets that header itself",
                        name.as_str()
                    )));
                }
                let value = fields.secret("value", |s| match s {
                    Self::ApiKey { value, .. } => Some(value),
                    _ => None,
                })?;
                if !value.is_ascii() || http::HeaderValue::from_str(&value).is_err() {
                    return Err(AppError::validation(
                        "authConfig.value must be a valid HTTP header value (visible ASCII)",
                    ));
                }
                // Kept as written (HeaderName lowercases): the client reads back what it sent.
                Ok(Self::ApiKey { key, value })
            }
            2 => {
                fields.require(&["token"], "2 (bearer token)")?;
                let token = fields.secret("token", |s| match s {
                    Self::Bearer { token } => Some(token),
                    _ => None,
                })?;
                // Compared as bytes: a slice of the string at byte 7 panics inside a multi-byte character.
                if token
                    .as_bytes()
                    .get(..7)
                    .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"bearer "))
                {
                    return Err(AppError::validation(
                        "authConfig.token must be the token alone, without the `Bearer ` prefix",
                    ));
                }
                // HeaderValue takes any byte above 0x7f as opaque, so ASCII is checked on its own.
                if !token.is_ascii() || http::HeaderValue::from_str(&token).is_err() {
                    return Err(AppError::validation("authConfig.token must be visible ASCII"));
                }
                Ok(Self::Bearer { token })
            }
            3 => {
                fields.require(
                    &["clientId", "clientSecret", "tokenUrl"],
                    "3 (OAuth 2.0 client credentials)",
                )?;
                let token_url = fields.plain("tokenUrl")?;
                crate::validate::http_url("authConfig.tokenUrl", &token_url)?;
                Ok(Self::OAuth2 {
                    client_id: fields.plain("clientId")?,
                    client_secret: fields.secret("clientSecret", |s| match s {
                        Self::OAuth2 { client_secret, .. } => Some(client_secret),
                        _ => None,
                    })?,
                    token_url,
                })
            }
            _ => Err(AppError::validation(
                "authType must be 0 (none), 1 (API key header), 2 (bearer token) or 3 (OAuth 2.0 client credentials)",
            )),
        }
    }

    /// The config as reads show it: secret fields masked, `null` for type 0.
    pub fn masked(&self) -> Value {
        match self {
            Self::None => Value::Null,
            Self::ApiKey { key, value } => json!({ "key": key, "value": mask_secret(value) }),
            Self::Bearer { token } => json!({ "token": mask_secret(token) }),
            Self::OAuth2 {
                client_id,
                client_secret,
                token_url,
            } => json!({ "clientId": client_id, "clientSecret": mask_secret(client_secret), "tokenUrl": token_url }),
        }
    }
}

struct Fields<'a> {
    obj: &'a Map<String, Value>,
    stored: Option<&'a AuthConfig>,
}

impl Fields<'_> {
    fn text(&self, name: &str) -> AppResult<Option<String>> {
        match self.obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_owned()).filter(|s| !s.is_empty())),
            Some(_) => Err(AppError::validation(format!("authConfig.{name} must be a string"))),
        }
    }

    /// Names every missing field at once.
    fn require(&self, names: &[&str], type_label: &str) -> AppResult<()> {
        let mut missing = Vec::new();
        for name in names {
            if self.text(name)?.is_none() {
                missing.push(format!("authConfig.{name}"));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(AppError::validation(format!(
            "{} required for authType {type_label}",
            match missing.len() {
                1 => format!("{} is", missing[0]),
                _ => format!("{} are", missing.join(", ")),
            }
        )))
    }

    fn plain(&self, name: &str) -> AppResult<String> {
        let value = self.text(name)?.unwrap_or_default();
        if value.chars().count() > 2000 {
            return Err(AppError::validation(format!(
                "authConfig.{name} must be at most 2000 characters"
            )));
        }
        Ok(value)
    }

    fn secret(&self, name: &str, pick: impl Fn(&AuthConfig) -> Option<&String>) -> AppResult<String> {
        let value = self.plain(name)?;
        if !is_masked(&value) {
            return Ok(value);
        }
        self.stored.and_then(pick).cloned().ok_or_else(|| {
            AppError::validation(format!(
                "authConfig.{name} is a masked value but no secret is stored for it: send the real value"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(t: i64, v: Value) -> String {
        AuthConfig::parse(t, Some(&v), None).unwrap_err().to_string()
    }

    #[test]
    fn names_each_missing_field() {
        assert_eq!(
            err(1, json!({})),
            "authConfig.key, authConfig.value are required for authType 1 (API key header)"
        );
        assert_eq!(
            err(1, json!({"key": "X-Api-Key"})),
            "authConfig.value is required for authType 1 (API key header)"
        );
        assert_eq!(
            err(2, json!({"token": " "})),
            "authConfig.token is required for authType 2 (bearer token)"
        );
        assert_eq!(
            err(3, json!({"clientId": "a"})),
            "authConfig.clientSecret, authConfig.tokenUrl are required for authType 3 (OAuth 2.0 client credentials)"
        );
        assert!(AuthConfig::parse(2, None, None).is_err());
    }

    #[test]
    fn checks_shapes() {
        assert!(err(5, json!(null)).starts_with("authType must be 0"));
        assert_eq!(
            err(0, json!({"token": "x"})),
            "authConfig must be null for authType 0 (none)"
        );
        assert_eq!(AuthConfig::parse(0, Some(&json!({})), None).unwrap(), AuthConfig::None);
        assert!(err(1, json!({"key": "bad header", "value": "v"})).contains("valid HTTP header name"));
        assert!(err(1, json!({"key": "Mcp-Session-Id", "value": "v"})).contains("must not be mcp-session-id"));
        assert!(err(2, json!({"token": "Bearer abc"})).contains("without the `Bearer ` prefix"));
        assert!(err(3, json!({"clientId": "a", "clientSecret": "b", "tokenUrl": "ftp://x"})).contains("tokenUrl"));
        assert!(err(2, json!({"token": 5})).contains("must be a string"));
    }

    #[test]
    fn non_ascii_tokens_are_refused_not_a_panic() {
        // Byte 7 falls inside "é" (bytes 6 and 7), inside "€" and inside the emoji.
        for token in ["bearerétoken", "beare€x-token", "abc🔑defgh", "é", "ééééééé"] {
            let err = err(2, json!({ "token": token }));
            assert!(err.contains("visible ASCII"), "{token}: {err}");
        }
        assert!(err(2, json!({"token": "BEARER abc"})).contains("without the `Bearer ` prefix"));
        let err = err(1, json!({"key": "X-Api-Key", "value": "clé-secrète"}));
        assert!(err.contains("visible ASCII"), "{err}");
    }

    #[test]
    fn masks_and_keeps_stored_secrets() {
        let stored = AuthConfig::parse(
            1,
            Some(&json!({"key": "X-Api-Key", "value": "secret-value-1234"})),
            None,
        )
        .unwrap();
        let shown = stored.masked();
        assert_eq!(shown, json!({"key": "X-Api-Key", "value": "****1234"}));
        let again = AuthConfig::parse(1, Some(&shown), Some(&stored)).unwrap();
        assert_eq!(again, stored);
        // A masked value of another type has nothing to keep.
        let other = AuthConfig::parse(2, Some(&json!({"token": "abcd****wxyz"})), Some(&stored));
        assert!(other.unwrap_err().to_string().contains("masked value"));
        assert_eq!(format!("{stored:?}"), "AuthConfig(type 1)");
    }
}
