//! Uploaded files: bytes in object storage, metadata in Postgres.

pub mod leftovers;
pub mod model;
pub mod repo;
pub mod service;

pub use model::*;
