//! Page/size query parameters and the paged list shape.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

const DEFAULT_PAGE_SIZE: i64 = 10;
const MAX_PAGE_SIZE: i64 = 100;

/// `page` (default 1) and `size` (default 10, at most 100; larger values are clamped, values
/// below 1 give the default).
#[derive(Debug, Default, Clone, Copy, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// 1-based page number.
    pub page: Option<i64>,
    /// Page size, 1 to 100.
    pub size: Option<i64>,
}

impl PageQuery {
    pub fn page(&self) -> i64 {
        self.page.filter(|p| *p >= 1).unwrap_or(1)
    }
    pub fn size(&self) -> i64 {
        // decisions.md: below 1 means "not given", so the default, not a one-row page.
        self.size
            .filter(|s| *s >= 1)
            .map(|s| s.min(MAX_PAGE_SIZE))
            .unwrap_or(DEFAULT_PAGE_SIZE)
    }
    pub fn offset(&self) -> i64 {
        (self.page() - 1).saturating_mul(self.size())
    }
}

/// The admin API's paged list: `{data, page, size, total}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub page: i64,
    pub size: i64,
    pub total: i64,
}

impl<T> Page<T> {
    pub fn new(data: Vec<T>, query: PageQuery, total: i64) -> Self {
        Self {
            data,
            page: query.page(),
            size: query.size(),
            total,
        }
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            data: self.data.into_iter().map(f).collect(),
            page: self.page,
            size: self.size,
            total: self.total,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_and_defaults() {
        let q = PageQuery {
            page: Some(0),
            size: Some(1000),
        };
        assert_eq!((q.page(), q.size(), q.offset()), (1, 100, 0));
        let q = PageQuery {
            page: Some(3),
            size: None,
        };
        assert_eq!((q.page(), q.size(), q.offset()), (3, 10, 20));
        let q = PageQuery {
            page: Some(i64::MAX),
            size: Some(100),
        };
        assert!(q.offset() > 0);
        let q = PageQuery {
            page: Some(-5),
            size: Some(0),
        };
        assert_eq!((q.page(), q.size()), (1, DEFAULT_PAGE_SIZE));
    }
}

/// Paging of the model module: `pageNum` (default 1) and `pageSize` (default 10, at most 100).
#[derive(Debug, Default, Clone, Copy, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct PageNumQuery {
    pub page_num: Option<i64>,
    pub page_size: Option<i64>,
}

impl From<PageNumQuery> for PageQuery {
    fn from(q: PageNumQuery) -> Self {
        Self {
            page: q.page_num,
            size: q.page_size,
        }
    }
}
