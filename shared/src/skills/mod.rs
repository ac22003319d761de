//! Skills: zip packages in object storage whose `SKILL.md` (YAML front matter with `name` and
//! `description`, then instructions) tells an agent how to do something, with supporting files
//! beside it. Online file editing with optimistic concurrency, safe zip handling and AI drafts.

pub mod catalog;
pub mod drafts;
pub mod files;
pub mod front_matter;
pub mod model;
pub mod package;
pub mod path;
mod repo;
pub mod service;
pub mod storage;

pub use catalog::{briefs, ensure_exist, existing_ids, read_text_file};
pub use model::*;
pub use package::{FileNode, SKILL_MD};
