//! Black-box tests of the API over HTTP. One binary, so the application links once.

mod agents;
mod apps;
mod chat;
mod deployment;
mod external;
mod hostile_input;
mod knowledge;
mod lambda;
mod mcp;
mod memory;
mod model_client;
mod models;
mod permissions;
mod platform;
mod queues;
mod resources;
mod retrieval_quality;
mod search;
mod skills;
mod ssrf;
mod store_backends;
mod users;
