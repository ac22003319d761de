//! Apps (third-party client applications), their client nodes and the embed tokens they sign.

pub mod embed_token;
pub mod frame_ancestors;
pub mod model;
pub mod node_client;
pub mod node_proto;
pub mod node_repo;
pub mod node_wire;
pub mod nodes;
pub mod repo;
pub mod routing;
pub mod service;

pub use model::*;
