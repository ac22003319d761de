//! `sqlx::migrate!` embeds the migrations at compile time; rebuild when one is added or changed.
//! The protos are compiled with protox (pure Rust), so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../migrations");
    // The client node's service: the platform calls it, the reference node serves it.
    compile("proto/client_node.proto", true)?;
    // Milvus: the platform is only ever its client.
    compile("proto/milvus.proto", false)
}

fn compile(proto: &str, server: bool) -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(server)
        .compile_fds(descriptors)?;
    Ok(())
}
