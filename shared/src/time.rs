//! Timestamp rendering. Stored as `timestamptz`, shown in the configured zone in the two
//! formats of the spec.

use std::sync::OnceLock;

use chrono::{DateTime, FixedOffset, Utc};

static OFFSET: OnceLock<FixedOffset> = OnceLock::new();

/// Sets the zone used for rendering; the first call wins (config is read once per process).
pub fn set_utc_offset(seconds: i32) {
    let _ = OFFSET.set(FixedOffset::east_opt(seconds).unwrap_or_else(utc));
}

fn utc() -> FixedOffset {
    FixedOffset::east_opt(0).expect("zero offset is valid")
}

fn local(dt: DateTime<Utc>) -> DateTime<FixedOffset> {
    dt.with_timezone(OFFSET.get_or_init(utc))
}

/// `YYYY-MM-DD HH:mm:ss`, the admin API's format.
pub fn datetime(dt: DateTime<Utc>) -> String {
    local(dt).format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `YYYY-MM-DDTHH:mm:ss`, the format of model configs and skills.
pub fn iso_local(dt: DateTime<Utc>) -> String {
    local(dt).format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// `YYYY-MM-DD` in the configured zone.
pub fn date(dt: DateTime<Utc>) -> String {
    local(dt).format("%Y-%m-%d").to_string()
}

/// Midnight, in the configured zone, of the day `dt` falls on.
pub fn start_of_day(dt: DateTime<Utc>) -> DateTime<Utc> {
    let l = local(dt);
    let midnight = l.date_naive().and_hms_opt(0, 0, 0).unwrap_or_default();
    midnight
        .and_local_timezone(*l.offset())
        .single()
        .map_or(dt, |d| d.with_timezone(&Utc))
}

/// Parses a client-supplied `YYYY-MM-DD HH:mm:ss` (or a bare date) in the configured zone.
/// The year is four digits: chrono also reads a sign and more digits, years Postgres refuses.
/// The end of a range as `parse_datetime` reads it, reaching the last microsecond of what it
/// shows (times are stored to the microsecond and shown to the second): the whole day of a date,
/// the whole second of a time. An end of 23:59:59 left out what was written in its last second,
/// and a date written without its zeros (2026-1-31, which parses) was taken for its midnight.
pub fn parse_end(value: &str) -> Option<DateTime<Utc>> {
    let at = parse_datetime(value)?;
    let bare_date = chrono::NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d").is_ok();
    let shown = match bare_date {
        true => chrono::Duration::days(1),
        false => chrono::Duration::seconds(1),
    };
    Some(at + shown - chrono::Duration::microseconds(1))
}

pub fn parse_datetime(value: &str) -> Option<DateTime<Utc>> {
    let offset = *OFFSET.get_or_init(utc);
    let value = value.trim();
    let year = value.as_bytes().get(..5)?;
    if !(year[..4].iter().all(u8::is_ascii_digit) && year[4] == b'-') {
        return None;
    }
    let naive = chrono::NaiveDateTime::parse_from_str(value, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S"))
        .ok()
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })?;
    naive.and_local_timezone(offset).single().map(|d| d.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_round_trip() {
        let dt = parse_datetime("2026-01-02 03:04:05").unwrap();
        assert_eq!(datetime(dt), "2026-01-02 03:04:05");
        assert_eq!(iso_local(dt), "2026-01-02T03:04:05");
        assert_eq!(datetime(parse_datetime("2026-01-02").unwrap()), "2026-01-02 00:00:00");
        assert!(parse_datetime("yesterday").is_none());
        for far in ["-5000-01-01", "+2026-01-01", "12026-01-01 00:00:00", "226-01-01"] {
            assert!(parse_datetime(far).is_none(), "{far}");
        }
    }
}
