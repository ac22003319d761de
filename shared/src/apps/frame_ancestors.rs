//! Which pages may frame an app's embedded chat page: the app's list of CSP `frame-ancestors`
//! sources, checked so that nothing in it can end the directive or add another.

use serde::Deserialize;

use crate::{AppError, AppResult, AppState};

const MAX_SOURCES: usize = 16;
const MAX_SOURCE_LEN: usize = 200;

/// The list as stored: trimmed, each a source expression `frame-ancestors` takes: `'self'`,
/// `'none'` (alone), a scheme (`https:`), or a host with an optional scheme, `*.` prefix, port
/// and path (`https://*.partner.example:8443`). `*` is refused: an empty list already means any.
pub fn check(list: Vec<String>) -> AppResult<Vec<String>> {
    if list.len() > MAX_SOURCES {
        return Err(AppError::validation(format!(
            "frameAncestors: at most {MAX_SOURCES} sources"
        )));
    }
    let list: Vec<String> = list.into_iter().map(|s| s.trim().to_owned()).collect();
    for source in &list {
        if !is_source(source) {
            return Err(AppError::validation(format!(
                "frameAncestors: {source:?} is not a frame-ancestors source (e.g. https://partner.example, \
                 https://*.partner.example, 'self', https:)"
            )));
        }
    }
    if list.len() > 1 && list.iter().any(|s| s == "'none'") {
        return Err(AppError::validation("frameAncestors: 'none' must stand alone"));
    }
    Ok(list)
}

/// The query of the embedded chat page.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EmbedPageQuery {
    /// The `appId` whose `frameAncestors` may frame the page.
    pub app: Option<String>,
}

/// The pages that may frame the chat page for `app_id`: the app's list, or none listed (any
/// page) for an app that does not exist or is disabled, whose page answers nothing anyway.
pub async fn of_app(state: &AppState, app_id: &str) -> AppResult<Vec<String>> {
    Ok(super::repo::find_by_app_id(state.db(), app_id)
        .await?
        .filter(super::AppRow::is_enabled)
        .map(|a| a.frame_ancestors)
        .unwrap_or_default())
}

/// The directive for a page framed under `list`.
pub fn directive(list: &[String]) -> String {
    if list.is_empty() {
        "frame-ancestors *".to_owned()
    } else {
        format!("frame-ancestors {}", list.join(" "))
    }
}

fn is_source(s: &str) -> bool {
    if s.is_empty() || s.len() > MAX_SOURCE_LEN {
        return false;
    }
    if s == "'self'" || s == "'none'" {
        return true;
    }
    let scheme_ok = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    };
    // A scheme alone: `https:`.
    if let Some(scheme) = s.strip_suffix(':') {
        return scheme_ok(scheme);
    }
    let rest = match s.split_once("://") {
        Some((scheme, rest)) if scheme_ok(scheme) => rest,
        Some(_) => return false,
        None => s,
    };
    let (host_port, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (host_port, None),
    };
    let host = host.strip_prefix("*.").unwrap_or(host);
    let host_ok = !host.is_empty()
        && host
            .split('.')
            .all(|label| !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    let port_ok =
        port.is_none_or(|p| p == "*" || (!p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit())));
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~/%!$&()*+=@".contains(c));
    host_ok && port_ok && path_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_that_could_end_or_add_a_directive_are_refused() {
        let ok = [
            "https://partner.example",
            "https://*.partner.example:8443",
            "partner.example",
            "http://localhost:3000/app/",
            "'self'",
            "https:",
        ];
        for s in ok {
            assert!(is_source(s), "{s}");
        }
        let bad = [
            "*",
            "https://a.example; script-src *",
            "https://a.example,https://b.example",
            "https://a.example b.example",
            "'unsafe-inline'",
            "javascript:alert(1)",
            "https://",
            "https://a..example",
            "",
        ];
        for s in bad {
            assert!(!is_source(s), "{s}");
        }
        assert!(check(vec!["'none'".into(), "https://a.example".into()]).is_err());
        assert_eq!(
            check(vec![" https://a.example ".into()]).unwrap(),
            vec!["https://a.example".to_owned()]
        );
        assert!(check(vec!["https://a.example".into(); 17]).is_err());
        assert_eq!(directive(&[]), "frame-ancestors *");
        assert_eq!(
            directive(&["https://a.example".into(), "'self'".into()]),
            "frame-ancestors https://a.example 'self'"
        );
    }
}
