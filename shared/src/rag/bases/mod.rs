//! Knowledge bases: settings, lifecycle, and the per-base vector index.

pub mod model;
pub mod repo;
pub mod service;
pub mod settings;

pub use model::*;
pub use settings::*;
