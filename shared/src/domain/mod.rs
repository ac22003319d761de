//! The vocabulary every domain module shares: who is calling (a user, an app, the owner of a
//! conversation), paging, uploaded files, files to serve and streamed answers.
//!
//! It sits below the domain modules and above the clients and state, and knows nothing of
//! HTTP: the axum side of these types (extractors, responses) lives in `crate::http`.

mod caller;
mod datetime_range;
mod owner;
mod paging;
mod stored_file;
mod stream;
mod upload;

pub use caller::{AppCaller, CurrentUser, Role};
pub use datetime_range::DatetimeRange;
pub use owner::Owner;
pub use paging::{Page, PageNumQuery, PageQuery};
pub use stored_file::{Disposition, StoredFile};
pub use stream::{spawn_joined_stream, spawn_stream};
pub use upload::UploadedFile;
