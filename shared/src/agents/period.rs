//! `start` / `end` query parameters: timestamps or bare dates; an end covers the whole day or
//! second it names.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::{time, AppError, AppResult};

#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PeriodQuery {
    /// `YYYY-MM-DD` or `YYYY-MM-DD HH:mm:ss`.
    pub start: Option<String>,
    /// `YYYY-MM-DD` (the whole day) or `YYYY-MM-DD HH:mm:ss`.
    pub end: Option<String>,
}

/// A bound as given; an end covers the whole day or second it names (`time::parse_end`).
fn parse(field: &str, value: &str, end: bool) -> AppResult<DateTime<Utc>> {
    let at = match end {
        true => time::parse_end(value),
        false => time::parse_datetime(value),
    };
    at.ok_or_else(|| AppError::validation(format!("{field} must be a date like 2026-01-31 or 2026-01-31 23:59:59")))
}

impl PeriodQuery {
    /// Both bounds, when either is given (an open side reaches the epoch or now).
    pub fn range(&self) -> AppResult<Option<(DateTime<Utc>, DateTime<Utc>)>> {
        let start = crate::validate::optional(self.start.clone());
        let end = crate::validate::optional(self.end.clone());
        if start.is_none() && end.is_none() {
            return Ok(None);
        }
        let start = match start {
            Some(s) => parse("start", &s, false)?,
            None => DateTime::<Utc>::UNIX_EPOCH,
        };
        let end_given = end.is_some();
        let end = match end {
            Some(e) => parse("end", &e, true)?,
            None => Utc::now(),
        };
        if start > end {
            return Err(AppError::validation(match end_given {
                true => "start must not be after end",
                // The client sent no end: naming it would send them looking for a field they
                // did not send.
                false => "start must not be in the future (no end was given, so the period ends now)",
            }));
        }
        Ok(Some((start, end)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_end_date_covers_the_day() {
        let q = PeriodQuery {
            start: Some("2026-01-01".into()),
            end: Some("2026-01-01".into()),
        };
        let (s, e) = q.range().unwrap().unwrap();
        assert_eq!(time::datetime(s), "2026-01-01 00:00:00");
        assert_eq!(time::datetime(e), "2026-01-01 23:59:59");
        assert_eq!(e.timestamp_subsec_micros(), 999_999, "the whole last second");
        let unpadded = PeriodQuery {
            start: Some("2026-1-1".into()),
            end: Some("2026-1-1".into()),
        };
        assert_eq!(unpadded.range().unwrap().unwrap(), (s, e));
        let timed = PeriodQuery {
            start: Some("2026-01-01 08:00:00".into()),
            end: Some("2026-01-01 08:30:00".into()),
        };
        let (_, e) = timed.range().unwrap().unwrap();
        assert_eq!(time::datetime(e), "2026-01-01 08:30:00");
        assert_eq!(e.timestamp_subsec_micros(), 999_999);
        assert!(PeriodQuery::default().range().unwrap().is_none());
        let bad = PeriodQuery {
            start: Some("2026-02-01".into()),
            end: Some("2026-01-01".into()),
        };
        assert_eq!(bad.range().unwrap_err().to_string(), "start must not be after end");
        let future = PeriodQuery {
            start: Some("2999-01-01".into()),
            end: None,
        };
        assert!(future
            .range()
            .unwrap_err()
            .to_string()
            .starts_with("start must not be in the future"));
        let junk = PeriodQuery {
            start: Some("soon".into()),
            end: None,
        };
        assert!(junk.range().unwrap_err().to_string().starts_with("start"));
    }
}
