//! The `konnector` binary.

fn main() -> anyhow::Result<()> {
    konnector::cli::main()
}
