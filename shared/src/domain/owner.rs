//! Who a conversation, and every memory drawn from it, belongs to.

/// An admin-API user or a partner's end user (an `external_users` row, one per app and openId).
/// Conversations and memories of two owners never meet, even with equal conversation ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    User(i64),
    External(i64),
}

impl Owner {
    /// The `user_id` column of a row owned by this owner.
    pub fn user_id(self) -> Option<i64> {
        match self {
            Owner::User(id) => Some(id),
            Owner::External(_) => None,
        }
    }

    /// The `external_user_id` column of a row owned by this owner.
    pub fn external_user_id(self) -> Option<i64> {
        match self {
            Owner::User(_) => None,
            Owner::External(id) => Some(id),
        }
    }

    /// Tells owners apart in one text (`u7`, `e7`), as advisory lock keys name them.
    pub fn key(self) -> String {
        match self {
            Owner::User(id) => format!("u{id}"),
            Owner::External(id) => format!("e{id}"),
        }
    }
}
