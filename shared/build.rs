//! `sqlx::migrate!` embeds the migrations at compile time; rebuild when one is added or changed.
//! The client-node proto is compiled with protox (pure Rust), so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../migrations");
    let proto = "proto/client_node.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
