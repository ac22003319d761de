//! Reading JSON so that a wrong value is refused with the path of its field.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::AppError;

/// Deserialises JSON, turning serde's error into a message that starts with the field path.
/// A string holding a NUL character is refused: PostgreSQL cannot store one in text.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    let value = deserialize_json(bytes)?;
    if contains(bytes, br"\u0000") {
        if let Some(path) = serde_json::from_slice(bytes).ok().as_ref().and_then(nul_path) {
            return Err(AppError::Validation(format!("{path}: must not contain NUL characters")));
        }
    }
    Ok(value)
}

/// Tells an absent field (`None`) from an explicit `null` (`Some(None)`), for fields an update
/// clears with `null`: `#[serde(default, deserialize_with = "crate::json::nullable")]`.
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A list (or map) an update clears with `null` as with `[]`, as `nullable` fields are
/// cleared: absent is None, `null` an empty one (`#[serde(default, deserialize_with = ...)]`). Taken as
/// absent, a `null` answered 200 and kept the list.
pub fn null_as_empty<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(d).map(|v| Some(v.unwrap_or_default()))
}

/// `value` with every NUL character dropped from its strings and keys: Postgres' jsonb holds
/// none, and a model's tool arguments may (escaped, so only parsing shows them).
pub fn without_nul(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(crate::text::model_text(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nul).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (crate::text::model_text(&k), without_nul(v)))
                .collect(),
        ),
        other => other,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The path of the first string (or object key) holding a NUL character, as serde names it.
fn nul_path(value: &serde_json::Value) -> Option<String> {
    let mut segments = Vec::new();
    find_nul(value, &mut segments).then(|| match segments.join(".") {
        path if path.is_empty() => "request body".to_owned(),
        path => path.replace(".[", "["),
    })
}

fn find_nul(value: &serde_json::Value, segments: &mut Vec<String>) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .any(|(i, v)| descend(segments, format!("[{i}]"), |s| find_nul(v, s))),
        Value::Object(map) => map.iter().any(|(k, v)| {
            let key = k.replace('\0', "\\u0000");
            k.contains('\0') && descend(segments, key.clone(), |_| true) || descend(segments, key, |s| find_nul(v, s))
        }),
        _ => false,
    }
}

/// Runs `inside` with `segment` on the path, keeping it there only when something was found.
fn descend(segments: &mut Vec<String>, segment: String, inside: impl FnOnce(&mut Vec<String>) -> bool) -> bool {
    segments.push(segment);
    let found = inside(segments);
    if !found {
        segments.pop();
    }
    found
}

fn deserialize_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.inner();
        let detail = inner.to_string();
        let detail = detail.split(" at line ").next().unwrap_or(&detail).to_owned();
        let message = if let Some(field) = missing_field(&detail) {
            let full = if path == "." {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            };
            format!("{full} is required")
        } else if inner.is_syntax() || inner.is_eof() {
            format!("request body is not valid JSON: {detail}")
        } else if path == "." {
            format!("request body: {detail}")
        } else {
            format!("{path}: {detail}")
        };
        AppError::Validation(message)
    })
}

fn missing_field(detail: &str) -> Option<&str> {
    detail.strip_prefix("missing field `")?.strip_suffix('`')
}

/// Openers `first_value` tries before it gives up: a long answer full of braces is not parsed
/// from each of them.
const OPENERS_TRIED: usize = 16;

/// Why a model's answer held no JSON value of the kind asked for.
#[derive(Debug)]
pub enum NoValue {
    /// Not one of the openers.
    NoJson,
    /// The first opener's parse error: nothing parsed.
    Invalid(serde_json::Error),
    /// Values parsed, none of the kind asked for.
    Unfit,
}

/// The first JSON value a model wrapped in prose or a code fence that `fits`: parsed from
/// each of `opens` in turn, whatever follows the value. Cut from the first opener to the last
/// closer, a bracket in the prose around the JSON ("skipped {small talk}") made the whole
/// answer invalid; and the first value alone may be the prose's (a citation `[1]`, or an
/// example the model restated before its answer).
pub fn first_value(
    text: &str,
    opens: &[char],
    fits: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value, NoValue> {
    let mut missed = NoValue::NoJson;
    for (at, _) in text.match_indices(opens).take(OPENERS_TRIED) {
        match serde_json::Deserializer::from_str(&text[at..])
            .into_iter::<serde_json::Value>()
            .next()
        {
            Some(Ok(value)) if fits(&value) => return Ok(value),
            Some(Ok(_)) => missed = NoValue::Unfit,
            Some(Err(e)) => {
                if matches!(missed, NoValue::NoJson) {
                    missed = NoValue::Invalid(e);
                }
            }
            None => {}
        }
    }
    Err(missed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn nul_goes_from_strings_and_keys() {
        let v: serde_json::Value = serde_json::from_str(r#"{"q\u0000": ["a\u0000b", 1, {"c": "\u0000"}]}"#).unwrap();
        assert_eq!(without_nul(v), serde_json::json!({ "q": ["ab", 1, { "c": "" }] }));
    }

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Body {
        username: String,
        inner: Option<Inner>,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: i64,
    }

    fn msg(json: &str) -> String {
        parse_json::<Body>(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_fields() {
        assert_eq!(msg("{}"), "username is required");
        assert!(msg(r#"{"username": 3}"#).starts_with("username: invalid type"));
        assert!(msg(r#"{"username": "a", "inner": {"n": "x"}}"#).starts_with("inner.n: invalid type"));
        assert!(msg("{").starts_with("request body is not valid JSON"));
    }

    #[test]
    fn nul_characters_are_refused_by_field() {
        assert_eq!(
            msg(r#"{"username": "a\u0000b"}"#),
            "username: must not contain NUL characters"
        );
        assert_eq!(
            msg(r#"{"username": "a", "inner": {"n": 1}, "tags": ["x", "\u0000"]}"#),
            "tags[1]: must not contain NUL characters"
        );
        assert!(parse_json::<Body>(br#"{"username": "a\\u0000"}"#).is_ok());
    }
}
