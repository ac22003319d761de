//! `GET /agent/{id}/analytics` and `usage-detail`, computed from the stored messages.
//!
//! Buckets: `1d` is the last 24 hours by hour; `7d` and `30d` end today and go by day;
//! `custom` runs from `start` to `end` (default today) by day, at most 366 days. Days and
//! hours without activity are zeros. `totalMessages` counts both roles; `activeUsers` are the
//! distinct people (users or external users) who sent a message; `avgResponseTime` is the mean
//! duration in milliseconds of completed answers.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::period::PeriodQuery;
use super::service;
use crate::domain::{CurrentUser, Page, PageQuery};
use crate::{time, AppError, AppResult, AppState};

const MAX_CUSTOM_DAYS: i64 = 366;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AnalyticsQuery {
    /// `1d`, `7d` (default), `30d` or `custom`.
    pub range: Option<String>,
    /// Required with `custom`: `YYYY-MM-DD`.
    pub start: Option<String>,
    /// With `custom`: `YYYY-MM-DD` (default today).
    pub end: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DateRange {
    pub start: String,
    pub end: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Analytics {
    pub active_users: i64,
    pub conversation_count: i64,
    pub total_messages: i64,
    pub total_tool_calls: i64,
    /// Milliseconds.
    pub avg_response_time: f64,
    pub active_users_trend: Vec<i64>,
    pub conversation_count_trend: Vec<i64>,
    pub message_trend: Vec<i64>,
    pub tool_call_trend: Vec<i64>,
    pub date_labels: Vec<String>,
    pub date_range: DateRange,
}

/// The window split into equal buckets.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: DateTime<Utc>,
    bucket: Duration,
    buckets: i64,
}

impl Window {
    fn end(&self) -> DateTime<Utc> {
        self.start + self.bucket * self.buckets as i32
    }

    fn labels(&self) -> Vec<String> {
        (0..self.buckets)
            .map(|i| {
                let at = self.start + self.bucket * i as i32;
                // An hour's bucket is labelled with its local start to the minute: buckets
                // follow UTC hours, and in a zone half an hour off ("+05:30") a label cut at
                // the hour named a time 30 minutes before the bucket's.
                if self.bucket == Duration::hours(1) {
                    time::datetime(at)[..16].to_owned()
                } else {
                    time::date(at)
                }
            })
            .collect()
    }
}

fn window(q: &AnalyticsQuery, now: DateTime<Utc>) -> AppResult<Window> {
    let today = time::start_of_day(now);
    let days = |n: i64| Window {
        start: today - Duration::days(n - 1),
        bucket: Duration::days(1),
        buckets: n,
    };
    match q.range.as_deref().map(str::trim).unwrap_or("7d") {
        "1d" => {
            let secs = now.timestamp();
            let hour = DateTime::from_timestamp(secs - secs.rem_euclid(3600), 0).unwrap_or(now);
            Ok(Window {
                start: hour - Duration::hours(23),
                bucket: Duration::hours(1),
                buckets: 24,
            })
        }
        "7d" => Ok(days(7)),
        "30d" => Ok(days(30)),
        "custom" => {
            let period = PeriodQuery {
                start: Some(crate::validate::required("start", q.start.clone())?),
                end: q.end.clone(),
            };
            let (start, end) = period
                .range()?
                .ok_or_else(|| AppError::validation("start is required"))?;
            let start = time::start_of_day(start);
            let n = (time::start_of_day(end) - start).num_days() + 1;
            if n > MAX_CUSTOM_DAYS {
                return Err(AppError::validation(format!(
                    "a custom range may span at most {MAX_CUSTOM_DAYS} days"
                )));
            }
            Ok(Window {
                start,
                bucket: Duration::days(1),
                buckets: n,
            })
        }
        other => Err(AppError::validation(format!(
            "range must be 1d, 7d, 30d or custom, got {other:?}"
        ))),
    }
}

#[derive(sqlx::FromRow)]
struct BucketRow {
    b: i32,
    messages: i64,
    tool_calls: i64,
    active_users: i64,
}

#[derive(sqlx::FromRow)]
struct Totals {
    messages: i64,
    tool_calls: i64,
    active_users: i64,
    avg_response_ms: Option<f64>,
}

const OWNER_KEY: &str = "COALESCE('u' || c.user_id, 'e' || c.external_user_id)";

pub async fn analytics(state: &AppState, user: &CurrentUser, agent_id: i64, q: AnalyticsQuery) -> AppResult<Analytics> {
    service::managed(state, user, agent_id).await?;
    let w = window(&q, Utc::now())?;
    let (start, end, secs) = (w.start, w.end(), w.bucket.num_seconds() as f64);
    let db = state.db();
    let rows: Vec<BucketRow> = sqlx::query_as(&format!(
        "SELECT floor(extract(epoch FROM m.create_dt - $2) / $4)::INT AS b, count(*) AS messages,
           COALESCE(sum(m.tool_call_count), 0)::BIGINT AS tool_calls,
           count(DISTINCT {OWNER_KEY}) FILTER (WHERE m.role = 'user') AS active_users
         FROM messages m JOIN conversations c ON c.id = m.conversation_id
         WHERE m.agent_id = $1 AND m.create_dt >= $2 AND m.create_dt < $3 GROUP BY 1"
    ))
    .bind(agent_id)
    .bind(start)
    .bind(end)
    .bind(secs)
    .fetch_all(db)
    .await?;
    // A conversation's last activity is never before its creation: the bound on it lets the
    // (agent, last activity) index skip the conversations idle since before the period, which
    // the creation time alone (not indexed) made Postgres read, all of the agent's.
    let conversations: Vec<(i32, i64)> = sqlx::query_as(
        "SELECT floor(extract(epoch FROM create_dt - $2) / $4)::INT, count(*) FROM conversations
         WHERE agent_id = $1 AND last_message_dt >= $2 AND create_dt >= $2 AND create_dt < $3 GROUP BY 1",
    )
    .bind(agent_id)
    .bind(start)
    .bind(end)
    .bind(secs)
    .fetch_all(db)
    .await?;
    let totals: Totals = sqlx::query_as(&format!(
        "SELECT count(*) AS messages, COALESCE(sum(m.tool_call_count), 0)::BIGINT AS tool_calls,
           count(DISTINCT {OWNER_KEY}) FILTER (WHERE m.role = 'user') AS active_users,
           (avg(m.duration_ms) FILTER (WHERE m.role = 'assistant' AND m.status = 1))::FLOAT8 AS avg_response_ms
         FROM messages m JOIN conversations c ON c.id = m.conversation_id
         WHERE m.agent_id = $1 AND m.create_dt >= $2 AND m.create_dt < $3"
    ))
    .bind(agent_id)
    .bind(start)
    .bind(end)
    .fetch_one(db)
    .await?;

    let n = w.buckets as usize;
    let trend = |pick: fn(&BucketRow) -> i64| spread(n, rows.iter().map(|r| (r.b, pick(r))));
    let message_trend = trend(|r| r.messages);
    let tool_call_trend = trend(|r| r.tool_calls);
    let active_users_trend = trend(|r| r.active_users);
    let conversation_count_trend = spread(n, conversations.into_iter());
    Ok(Analytics {
        active_users: totals.active_users,
        conversation_count: conversation_count_trend.iter().sum(),
        total_messages: totals.messages,
        total_tool_calls: totals.tool_calls,
        avg_response_time: (totals.avg_response_ms.unwrap_or(0.0) * 10.0).round() / 10.0,
        active_users_trend,
        conversation_count_trend,
        message_trend,
        tool_call_trend,
        date_labels: w.labels(),
        date_range: DateRange {
            start: time::datetime(start),
            end: time::datetime(end - Duration::seconds(1)),
        },
    })
}

/// One number per bucket from (bucket index, value) pairs; buckets without a pair are zero.
fn spread(n: usize, values: impl Iterator<Item = (i32, i64)>) -> Vec<i64> {
    let mut out = vec![0; n];
    for (b, v) in values {
        if let Some(slot) = usize::try_from(b).ok().and_then(|b| out.get_mut(b)) {
            *slot = v;
        }
    }
    out
}

#[derive(Debug, Serialize, ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct UsageDetail {
    /// The user's id, or the external user's id for partner end users.
    pub user_id: i64,
    pub user_name: String,
    /// Empty for users of the admin API; the app's name for external users.
    pub department: String,
    /// Messages the person sent.
    pub message_count: i64,
}

pub async fn usage_detail(
    state: &AppState,
    user: &CurrentUser,
    agent_id: i64,
    paging: PageQuery,
    period: PeriodQuery,
) -> AppResult<Page<UsageDetail>> {
    service::managed(state, user, agent_id).await?;
    let (start, end) = period.range()?.unwrap_or((DateTime::<Utc>::UNIX_EPOCH, Utc::now()));
    let grouped = "FROM messages m JOIN conversations c ON c.id = m.conversation_id
         LEFT JOIN users u ON u.id = c.user_id
         LEFT JOIN external_users e ON e.id = c.external_user_id
         LEFT JOIN apps a ON a.id = e.app_id
         WHERE m.agent_id = $1 AND m.role = 'user' AND m.create_dt BETWEEN $2 AND $3
         GROUP BY c.user_id, c.external_user_id, u.username, e.nickname, e.open_id, a.app_name";
    let total: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM (SELECT 1 {grouped}) g"))
        .bind(agent_id)
        .bind(start)
        .bind(end)
        .fetch_one(state.db())
        .await?;
    let rows: Vec<UsageDetail> = sqlx::query_as(&format!(
        "SELECT COALESCE(c.user_id, c.external_user_id) AS user_id,
           COALESCE(u.username, NULLIF(e.nickname, ''), e.open_id, '') AS user_name,
           COALESCE(a.app_name, '') AS department, count(*) AS message_count
         {grouped} ORDER BY message_count DESC, user_name, c.user_id, c.external_user_id LIMIT $4 OFFSET $5"
    ))
    .bind(agent_id)
    .bind(start)
    .bind(end)
    .bind(paging.size())
    .bind(paging.offset())
    .fetch_all(state.db())
    .await?;
    Ok(Page::new(rows, paging, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_range_with_labels() {
        let now = time::parse_datetime("2026-03-10 15:20:00").unwrap();
        let q = |r: &str| AnalyticsQuery {
            range: Some(r.into()),
            ..Default::default()
        };
        let w = window(&q("7d"), now).unwrap();
        assert_eq!(w.labels().first().unwrap(), "2026-03-04");
        assert_eq!(w.labels().last().unwrap(), "2026-03-10");
        let w = window(&q("1d"), now).unwrap();
        assert_eq!(w.labels().len(), 24);
        assert_eq!(w.labels().last().unwrap(), "2026-03-10 15:00");
        assert!(window(&q("custom"), now).unwrap_err().to_string().starts_with("start"));
        assert!(window(&q("2w"), now).unwrap_err().to_string().starts_with("range"));
        let custom = AnalyticsQuery {
            range: Some("custom".into()),
            start: Some("2026-03-01".into()),
            end: Some("2026-03-03".into()),
        };
        assert_eq!(
            window(&custom, now).unwrap().labels(),
            ["2026-03-01", "2026-03-02", "2026-03-03"]
        );
    }
}
