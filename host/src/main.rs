//! The `konnector` binary.

/// musl's malloc serialises on one lock and returns memory eagerly, and the konnector allocates
/// constantly (watch events, JSON, a Wasm store per policy call): in the static image allocation
/// was a quarter of its CPU profile. mimalloc takes that back; glibc builds keep glibc's malloc.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    konnector::cli::main()
}
