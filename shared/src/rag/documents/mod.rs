//! Documents of a knowledge base: upload with dedup, import by URL, lifecycle.

pub mod dedup;
pub mod model;
pub mod repo;
pub mod service;
pub mod upload;

pub use model::*;
