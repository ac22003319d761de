//! The generated client of `proto/milvus.proto`, the part of Milvus's gRPC interface the
//! vector index uses.

#![allow(clippy::all, clippy::pedantic)]

tonic::include_proto!("milvus.proto.milvus");
