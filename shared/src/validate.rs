//! Field validation helpers; every message starts with the field's name.
//!
//! Request fields checked with `required`/`present` stay `Option` so a missing one is a 400
//! naming it; mark them `#[schema(required = true)]` so the API document shows them required.

use crate::AppError;

/// A required, non-blank string, trimmed.
pub fn required(field: &str, value: Option<String>) -> Result<String, AppError> {
    match value.map(|v| v.trim().to_owned()) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(AppError::validation(format!("{field} is required"))),
    }
}

/// A required value of any type.
pub fn present<T>(field: &str, value: Option<T>) -> Result<T, AppError> {
    value.ok_or_else(|| AppError::validation(format!("{field} is required")))
}

/// Character length within `min..=max`.
pub fn length(field: &str, value: &str, min: usize, max: usize) -> Result<(), AppError> {
    let n = value.chars().count();
    if n < min || n > max {
        return Err(AppError::validation(format!(
            "{field} must be {min} to {max} characters long"
        )));
    }
    Ok(())
}

/// No control characters but, where `layout` allows, line breaks and tabs: text shown in
/// lists and cards to other users, where a control character means nothing and, escaped as
/// JSON (`\u0001`), takes six bytes for one.
pub fn printable(field: &str, value: &str, layout: bool) -> Result<(), AppError> {
    if value.chars().any(|c| unprintable(c, layout)) {
        let what = match layout {
            true => "control characters other than line breaks and tabs",
            false => "control characters",
        };
        return Err(AppError::validation(format!("{field} must not contain {what}")));
    }
    Ok(())
}

/// What `printable` refuses.
pub fn unprintable(c: char, layout: bool) -> bool {
    c.is_control() && !(layout && matches!(c, '\n' | '\r' | '\t'))
}

/// At most `max` characters, when given.
pub fn at_most(field: &str, value: Option<&str>, max: usize) -> Result<(), AppError> {
    match value {
        Some(v) => length(field, v, 0, max),
        None => Ok(()),
    }
}

/// Descriptions of things (providers, model configs, knowledge bases).
pub const MAX_DESCRIPTION: usize = 1000;
/// Icon and image addresses.
pub const MAX_URL: usize = 2048;

/// The largest vector dimension the service can index: pgvector's HNSW takes `vector` up to
/// 2000 dimensions and `halfvec` up to 4000, which is what knowledge bases and memories use
/// above 2000.
pub const MAX_VECTOR_DIMENSION: i32 = 4000;

/// A `dimensionOfVectorModel` the HNSW index can be built for. Checked before any narrowing,
/// so a number past i32 cannot wrap into range.
pub fn vector_dimension(requested: i64) -> Result<i32, AppError> {
    match i32::try_from(requested) {
        Ok(d) if (1..=MAX_VECTOR_DIMENSION).contains(&d) => Ok(d),
        _ => Err(AppError::validation(format!(
            "dimensionOfVectorModel must be between 1 and {MAX_VECTOR_DIMENSION}: pgvector indexes vectors \
             of up to 2000 dimensions, and up to {MAX_VECTOR_DIMENSION} stored at half precision"
        ))),
    }
}

/// An API key or token, sent in an HTTP header.
pub const MAX_SECRET: usize = 4096;

/// A secret sent in an HTTP header (an API key): visible ASCII, as a header carries it. A
/// control character or a newline would fail every request later, reported as an endpoint
/// that cannot be reached rather than as this field.
pub fn header_secret(field: &str, value: &str) -> Result<(), AppError> {
    length(field, value, 1, MAX_SECRET)?;
    if !value.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return Err(AppError::validation(format!(
            "{field} must be visible ASCII, as an HTTP header carries it"
        )));
    }
    Ok(())
}

/// The longest email address (RFC 5321's path limit).
pub const MAX_EMAIL: usize = 254;

pub fn email(field: &str, value: &str) -> Result<(), AppError> {
    let ok = value.len() <= MAX_EMAIL
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
        && value.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        });
    if ok {
        Ok(())
    } else {
        Err(AppError::validation(format!("{field} must be a valid email address")))
    }
}

pub fn range(field: &str, value: i64, min: i64, max: i64) -> Result<(), AppError> {
    if value < min || value > max {
        return Err(AppError::validation(format!("{field} must be between {min} and {max}")));
    }
    Ok(())
}

/// An optional string: None or blank becomes None, otherwise trimmed.
pub fn optional(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// An absolute `http://` or `https://` URL with a host and no `user:password@`: the address
/// is shown to whoever manages it and in errors and logs, where a password in it would be
/// read in full (credentials have fields of their own, kept sealed).
pub fn http_url(field: &str, value: &str) -> Result<(), AppError> {
    let parsed = reqwest::Url::parse(value)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
    match parsed {
        None => Err(AppError::validation(format!(
            "{field} must be an http:// or https:// URL"
        ))),
        Some(u) => without_credentials(field, &u, "use the credential fields"),
    }
}

/// Refuses a URL holding `user:password@`; `instead` says where the credentials go.
pub fn without_credentials(field: &str, url: &reqwest::Url, instead: &str) -> Result<(), AppError> {
    match url.username().is_empty() && url.password().is_none() {
        true => Ok(()),
        false => Err(AppError::validation(format!(
            "{field} must not hold credentials (user:password@); {instead}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_url_holds_no_credentials() {
        assert!(http_url("endpoint", "https://mcp.example.com/sse?x=1").is_ok());
        for bad in [
            "ftp://example.com",
            "https://",
            "mcp.example.com",
            "https://user:pw@example.com/sse",
            "https://user@example.com",
        ] {
            assert!(http_url("endpoint", bad).is_err(), "{bad}");
        }
        let told = http_url("endpoint", "https://a:b@example.com").unwrap_err().to_string();
        assert_eq!(
            told,
            "endpoint must not hold credentials (user:password@); use the credential fields"
        );
    }

    #[test]
    fn messages_name_the_field() {
        assert_eq!(
            required("username", Some("  ".into())).unwrap_err().to_string(),
            "username is required"
        );
        assert!(length("password", "abc", 8, 128)
            .unwrap_err()
            .to_string()
            .starts_with("password"));
        assert!(email("email", "a@b.co").is_ok());
        assert!(email("email", "a@b").is_err());
        assert!(email("email", "a b@c.de").is_err());
        assert!(email("email", "a@b@c.de").is_err());
        assert!(email("email", "a\u{7}@c.de").is_err());
        assert!(range("days", 0, 1, 10).unwrap_err().to_string().starts_with("days"));
    }

    #[test]
    fn vector_dimensions_past_what_pgvector_indexes_are_refused_by_name() {
        assert_eq!(vector_dimension(1).unwrap(), 1);
        assert_eq!(vector_dimension(2000).unwrap(), 2000);
        assert_eq!(vector_dimension(4000).unwrap(), 4000);
        // 4294967297 wraps to 1 as an i32: the check comes before the narrowing.
        for bad in [0, -1, 4001, 16_000, 4_294_967_297, i64::MAX] {
            let err = vector_dimension(bad).unwrap_err();
            assert_eq!(err.code(), 0, "{bad}: a validation failure");
            assert!(
                err.to_string()
                    .starts_with("dimensionOfVectorModel must be between 1 and 4000"),
                "{bad}: {err}"
            );
        }
    }
}
