//! Duplicate detection: what to do with an uploaded file that matches a document already in
//! the knowledge base, by name, by content, or either.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Decision {
    New,
    Skip,
    Overwrite,
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MatchType {
    None,
    ByName,
    ByContent,
}

/// An existing document an upload collides with (id, name); id None for another file of the
/// same upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub id: Option<i64>,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    pub match_type: MatchType,
    pub conflict: Option<Conflict>,
    pub reject_reason: Option<String>,
}

/// Applies strategy (0 none, 1 by name, 2 by content, 3 by name or content; content wins
/// when both match) and action (0 reject, 1 skip, 2 overwrite).
pub fn decide(strategy: i16, action: i16, by_name: Option<Conflict>, by_content: Option<Conflict>) -> Outcome {
    let found = match strategy {
        1 => by_name.map(|c| (MatchType::ByName, c)),
        2 => by_content.map(|c| (MatchType::ByContent, c)),
        3 => by_content
            .map(|c| (MatchType::ByContent, c))
            .or(by_name.map(|c| (MatchType::ByName, c))),
        _ => None,
    };
    let Some((match_type, conflict)) = found else {
        return Outcome {
            decision: Decision::New,
            match_type: MatchType::None,
            conflict: None,
            reject_reason: None,
        };
    };
    let what = if match_type == MatchType::ByContent {
        "the same content"
    } else {
        "the same name"
    };
    // Overwriting another file of the same upload is meaningless: it is skipped instead.
    let decision = match (action, conflict.id) {
        (0, _) => Decision::Reject,
        (2, Some(_)) => Decision::Overwrite,
        _ => Decision::Skip,
    };
    let reject_reason = (decision == Decision::Reject).then(|| match conflict.id {
        Some(_) => format!("a document with {what} already exists: {}", conflict.name),
        None => format!("another file in this upload has {what}: {}", conflict.name),
    });
    Outcome {
        decision,
        match_type,
        conflict: Some(conflict),
        reject_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: i64, name: &str) -> Option<Conflict> {
        Some(Conflict {
            id: Some(id),
            name: name.into(),
        })
    }

    #[test]
    fn every_strategy_and_action() {
        let name = || doc(1, "a.txt");
        let content = || doc(2, "b.txt");
        for action in 0..3 {
            assert_eq!(decide(0, action, name(), content()).decision, Decision::New);
        }
        let o = decide(1, 0, name(), content());
        assert_eq!(
            (o.decision, o.match_type, o.conflict.unwrap().id),
            (Decision::Reject, MatchType::ByName, Some(1))
        );
        assert!(o.reject_reason.unwrap().contains("same name"));
        assert_eq!(decide(1, 1, name(), None).decision, Decision::Skip);
        assert_eq!(decide(1, 2, name(), None).decision, Decision::Overwrite);
        assert_eq!(decide(1, 2, None, content()).decision, Decision::New);
        let o = decide(2, 2, name(), content());
        assert_eq!((o.decision, o.match_type), (Decision::Overwrite, MatchType::ByContent));
        assert_eq!(decide(2, 1, name(), None).decision, Decision::New);
        assert_eq!(decide(3, 1, name(), None).match_type, MatchType::ByName);
        assert_eq!(decide(3, 0, name(), content()).match_type, MatchType::ByContent);
        let same_upload = decide(
            2,
            2,
            None,
            Some(Conflict {
                id: None,
                name: "x".into(),
            }),
        );
        assert_eq!(same_upload.decision, Decision::Skip);
    }
}
