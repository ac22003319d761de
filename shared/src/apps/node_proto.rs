//! The generated types of `proto/client_node.proto`: the platform's client and the reference
//! node's server.

#![allow(clippy::all, clippy::pedantic)]

tonic::include_proto!("agent_platform.client_node.v1");
