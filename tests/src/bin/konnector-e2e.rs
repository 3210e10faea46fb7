//! The konnector, built by the same cargo invocation as the e2e tests (same features, so no
//! second build of the policy runtime): tests that run the konnector as a process use this.

fn main() -> anyhow::Result<()> {
    konnector::cli::main()
}
