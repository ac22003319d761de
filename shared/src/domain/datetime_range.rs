//! The `datetimeRange` query parameter: two timestamps, sent as repeated keys
//! (`datetimeRange=a&datetimeRange=b`, also `datetimeRange[]=`), indexed ones
//! (`datetimeRange[0]=a&datetimeRange[1]=b`), or one comma-separated value.

use chrono::{DateTime, Utc};

use crate::{time, AppError};

/// A closed range of time, or none when the parameter was absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct DatetimeRange(pub Option<(DateTime<Utc>, DateTime<Utc>)>);

impl DatetimeRange {
    /// Reads the parameter from a raw query string.
    pub fn from_query(query: &str) -> Result<Self, AppError> {
        let mut found: Vec<(usize, String)> = form_urlencoded::parse(query.as_bytes())
            .filter(|(k, _)| k == "datetimeRange" || k.starts_with("datetimeRange["))
            .enumerate()
            .map(|(position, (k, v))| (index_of(&k).unwrap_or(position), v.trim().to_owned()))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        // Indexed keys in their indexes' order: under Lambda the query string is rebuilt from
        // a map, and keys that differ come back in any order.
        found.sort_by_key(|(order, _)| *order);
        let mut values: Vec<String> = found.into_iter().map(|(_, v)| v).collect();
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
        // The end covers the whole day or second it names, as the rows show their times.
        let end = time::parse_end(end).ok_or_else(bad)?;
        if start > end {
            return Err(AppError::validation("datetimeRange start must not be after its end"));
        }
        Ok(Self(Some((start, end))))
    }
}

/// N of a `datetimeRange[N]` key.
fn index_of(key: &str) -> Option<usize> {
    key.strip_prefix("datetimeRange[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_start_then_end() {
        let (start, end) = ("2026-01-01%2000:00:00", "2026-01-31%2023:59:59");
        for query in [
            format!("datetimeRange={start}&datetimeRange={end}"),
            format!("datetimeRange[]={start}&datetimeRange[]={end}"),
            format!("datetimeRange[1]={end}&datetimeRange[0]={start}"),
            format!("datetimeRange={start},{end}"),
        ] {
            let range = DatetimeRange::from_query(&query).unwrap().0.unwrap();
            assert!(range.0 < range.1, "{query}");
        }
        let swapped = format!("datetimeRange={end}&datetimeRange={start}");
        assert!(DatetimeRange::from_query(&swapped).is_err());
        // One second, or one day, is a range too.
        for query in [
            "datetimeRange=2026-05-04%2010:11:12&datetimeRange=2026-05-04%2010:11:12",
            "datetimeRange=2026-05-04,2026-05-04",
        ] {
            let (start, end) = DatetimeRange::from_query(query).unwrap().0.unwrap();
            assert!(start < end, "{query}");
        }
    }
}
