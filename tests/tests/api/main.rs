//! Black-box tests of the API over HTTP. One binary, so the application links once.

mod deployment;
mod knowledge;
mod memory;
mod model_client;
mod models;
mod platform;
mod queues;
mod resources;
mod retrieval_quality;
mod search;
mod users;
