//! The `kubectl-kbind` binary: `kubectl kbind ...` as a kubectl plugin, or standalone.

fn main() -> std::process::ExitCode {
    kubectl_kbind::cli::main()
}
