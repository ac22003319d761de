//! The `datetimeRange` query parameter: two timestamps, sent as repeated keys
//! (`datetimeRange=a&datetimeRange=b`, also `datetimeRange[]=`) or as one comma-separated value.

use chrono::{DateTime, Utc};

use crate::{time, AppError};

/// A closed range of time, or none when the parameter was absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct DatetimeRange(pub Option<(DateTime<Utc>, DateTime<Utc>)>);

impl DatetimeRange {
    /// Reads the parameter from a raw query string.
    pub fn from_query(query: &str) -> Result<Self, AppError> {
        let mut values: Vec<String> = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "datetimeRange" || k.starts_with("datetimeRange["))
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        if values.len() == 1 && values[0].contains(',') {
            values = values[0].split(',').map(|v| v.trim().to_owned()).collect();
        }
        if values.is_empty() {
            return Ok(Self(None));
        }
        let bad = || AppError::validation("datetimeRange must be two timestamps like 2026-01-31 23:59:59 (start, end)");
        let [start, end] = values.as_slice() else {
            return Err(bad());
        };
        let start = time::parse_datetime(start).ok_or_else(bad)?;
        let end = time::parse_datetime(end).ok_or_else(bad)?;
        if start > end {
            return Err(AppError::validation("datetimeRange start must not be after its end"));
        }
        Ok(Self(Some((start, end))))
    }
}
