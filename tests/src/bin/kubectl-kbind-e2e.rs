//! `kubectl-kbind`, built by the same cargo invocation as the e2e tests (so Cargo sets
//! `CARGO_BIN_EXE_kubectl-kbind-e2e` for them): the same `kubectl_kbind::cli::main` as the
//! product binary.

fn main() -> std::process::ExitCode {
    kubectl_kbind::cli::main()
}
