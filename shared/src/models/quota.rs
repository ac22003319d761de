//! Token quotas: regular users spend `tokens` until `expireDt`; administrators are not limited.
//!
//! A model call first holds tokens: they leave the user's `tokens` in one statement that can
//! only take what is there, and the call is capped at what it holds. When it ends the hold is
//! settled: what the call used stays spent, the rest goes back. So concurrent calls can never
//! spend more than the quota, and `tokens` always shows what is free right now.

use sqlx::PgPool;
use tracing::Instrument;

use crate::{AppError, AppResult};

/// Tokens held from a user's quota for one model call (or one chat turn's first call).
/// Dropped unsettled, it gives everything back.
#[derive(Debug)]
pub struct Hold {
    db: PgPool,
    /// None: not limited (administrators, calls recorded for statistics only).
    user_id: Option<i64>,
    held: u64,
}

impl Hold {
    pub fn unlimited(db: &PgPool) -> Self {
        Self {
            db: db.clone(),
            user_id: None,
            held: 0,
        }
    }

    /// Holds up to `want` tokens of the user's quota; refuses a user with none left, an
    /// expired quota, or who no longer exists.
    pub async fn take(db: &PgPool, user_id: i64, want: u64) -> AppResult<Self> {
        // At least one token: a hold of none takes none, and "nothing taken" is what tells a
        // quota that is used up, so a call estimated at zero was refused to a user with tokens.
        let grab = grab_kept(db, user_id, want.max(1)).await?;
        let Some(grab) = grab else {
            return Err(AppError::unauthorized("the user no longer exists; please log in again"));
        };
        if grab.role == 1 {
            return Ok(Self::unlimited(db));
        }
        if grab.expired {
            return Err(AppError::Forbidden(
                "your token quota has expired; ask an administrator to renew it".into(),
            ));
        }
        if grab.taken == 0 {
            return Err(used_up());
        }
        Ok(Self {
            db: db.clone(),
            user_id: Some(user_id),
            held: grab.taken,
        })
    }

    /// Holds more, up to `want` in all, with whatever the quota still has; never refuses.
    pub async fn top_up(&mut self, want: u64) -> AppResult<()> {
        let Some(user_id) = self.user_id else {
            return Ok(());
        };
        if want > self.held {
            if let Some(grab) = grab_kept(&self.db, user_id, want - self.held).await? {
                self.held += grab.taken;
            }
        }
        Ok(())
    }

    /// Gives back all but `keep` of the hold (at least one token stays held), for the work a
    /// turn does before its first model call to pay from: held whole, a full answer's reserve
    /// took a small quota, and the turn's own retrieval found none left. The model call tops
    /// the hold up again with what is free then.
    pub async fn lend_above(&mut self, keep: u64) {
        let Some(user_id) = self.user_id else {
            return;
        };
        let keep = keep.max(1);
        if self.held <= keep {
            return;
        }
        let lent = self.held - keep;
        // Lowered before the write: dropped mid-write, the hold gives back only what it kept,
        // never the lent tokens a second time.
        self.held = keep;
        settle_in_task(&self.db, user_id, lent, 0).await;
    }

    /// Whose quota pays; None when not limited.
    pub fn payer(&self) -> Option<i64> {
        self.user_id
    }

    /// The most tokens the call may use; None when not limited.
    pub fn limit(&self) -> Option<u64> {
        self.user_id.map(|_| self.held)
    }

    /// Keeps `used` tokens spent and gives back the rest of the hold. A call that used more
    /// than it held (an estimate fell short) pays the difference from what is free, never
    /// below zero, and at most `MAX_OVERRUN` times its hold in all.
    ///
    /// The write runs as a task of its own: a caller dropped while it waits (a client that
    /// left) would otherwise stop it after the hold was taken off `self` and before the
    /// statement, and the hold was neither charged nor given back.
    pub async fn settle(mut self, used: u64) {
        let (Some(user_id), held) = (self.user_id.take(), self.held) else {
            return;
        };
        settle_in_task(&self.db, user_id, held, used).await;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(user_id) = self.user_id.take() else {
            return;
        };
        let (db, held) = (self.db.clone(), self.held);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                // In the request's span, as every spawned task here: its lines keep the id.
                handle.spawn(async move { settle(&db, user_id, held, 0).await }.in_current_span());
            }
            Err(_) => tracing::error!(user_id, held, "held tokens not given back: no runtime"),
        }
    }
}

fn used_up() -> AppError {
    AppError::Forbidden("your token quota is used up; ask an administrator for more".into())
}

/// The refusal when what is held does not even cover the request's prompt.
pub fn too_small(held: u64, needed: u64) -> AppError {
    AppError::Forbidden(format!(
        "your token quota is used up: {held} tokens left, this request needs about {needed}; ask an administrator for more"
    ))
}

struct Grab {
    role: i16,
    expired: bool,
    taken: u64,
}

/// Takes up to `want` tokens from a regular user with an unexpired quota, in one statement: the
/// row lock makes concurrent grabs queue, and each sees what the previous one left.
async fn grab(db: &PgPool, user_id: i64, want: u64) -> sqlx::Result<Option<Grab>> {
    let row: Option<(i16, bool, Option<i64>)> = sqlx::query_as(
        "WITH cur AS (
             SELECT id, role, tokens, COALESCE(expire_dt < now(), FALSE) AS expired
             FROM users WHERE id = $1 FOR UPDATE
         ), taken AS (
             UPDATE users u SET tokens = u.tokens - LEAST($2, cur.tokens)
             FROM cur WHERE u.id = cur.id AND cur.role = 2 AND NOT cur.expired AND cur.tokens > 0
             RETURNING LEAST($2, cur.tokens) AS n
         )
         SELECT cur.role, cur.expired, (SELECT n FROM taken) FROM cur",
    )
    .bind(user_id)
    .bind(want.min(i64::MAX as u64) as i64)
    .fetch_optional(db)
    .await?;
    Ok(row.map(|(role, expired, taken)| Grab {
        role,
        expired,
        taken: taken.unwrap_or(0).max(0) as u64,
    }))
}

/// `grab` in a task of its own, whose tokens go back when its caller is gone: dropped after the
/// statement took them and before the answer was read (a client leaving mid-turn), the caller's
/// hold never learnt of them, and they were lost to the quota for good. The answer travels as
/// a hold of what was taken, so one the caller never reads (not sent, or left in the channel)
/// gives its tokens back when it is dropped; read, it is released into the caller's hold with
/// no await in between.
async fn grab_kept(db: &PgPool, user_id: i64, want: u64) -> sqlx::Result<Option<Grab>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let db = db.clone();
    tokio::spawn(
        async move {
            let grabbed = grab(&db, user_id, want).await.map(|found| {
                found.map(|g| {
                    let unread = Hold {
                        db: db.clone(),
                        user_id: Some(user_id),
                        held: g.taken,
                    };
                    (g, unread)
                })
            });
            let _ = tx.send(grabbed);
        }
        .in_current_span(),
    );
    let grabbed = rx.await.unwrap_or(Err(sqlx::Error::WorkerCrashed))?;
    Ok(grabbed.map(|(g, mut read)| {
        read.user_id = None;
        g
    }))
}

/// `settle` in a task of its own, awaited: a caller dropped while it waits does not stop it.
async fn settle_in_task(db: &PgPool, user_id: i64, held: u64, used: u64) {
    let db = db.clone();
    let _ = tokio::spawn(async move { settle(&db, user_id, held, used).await }.in_current_span()).await;
}

/// The most a call is charged, in holds: the estimate a hold is made of counts with another
/// tokenizer than the model's, so an honest call can use somewhat more; an endpoint that
/// reports more is another user's model (an agent's) emptying the quota of whoever chats.
const MAX_OVERRUN: u64 = 2;

async fn settle(db: &PgPool, user_id: i64, held: u64, used: u64) {
    let used = used.min(held.saturating_mul(MAX_OVERRUN));
    if held == used {
        return;
    }
    // Converted without wrapping: a count past i64 would become a negative charge.
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let outcome = sqlx::query("UPDATE users SET tokens = GREATEST(tokens + $2 - $3, 0) WHERE id = $1")
        .bind(user_id)
        .bind(count(held))
        .bind(count(used))
        .execute(db)
        .await;
    if let Err(e) = outcome {
        tracing::error!(error = %e, user_id, held, used, "settling held tokens failed");
    }
}
