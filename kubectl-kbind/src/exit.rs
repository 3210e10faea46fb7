//! The exit codes scripts rely on (0 done, 1 failed or not ready, 2 usage error) and the two
//! error types a command returns to pick one.

use std::process::ExitCode;

/// Exit code of a usage error (clap uses the same for parse errors).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a failure or of something that is not ready.
pub const EXIT_FAILURE: u8 = 1;

/// A usage error found after parsing (flags that only make sense together); exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The command did its job but the result is not healthy (not Ready, blocked, failing
/// instances); what and why were already printed. Exit code 1.
#[derive(Debug)]
pub struct NotReady(pub String);

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotReady {}

/// Prints the error the way kubectl does and picks the exit code for it.
pub fn exit_code(e: &anyhow::Error) -> ExitCode {
    if let Some(usage) = e.downcast_ref::<UsageError>() {
        eprintln!("error: {usage}\nSee 'kubectl kbind --help' for usage.");
        return ExitCode::from(EXIT_USAGE);
    }
    if let Some(not_ready) = e.downcast_ref::<NotReady>() {
        eprintln!("{not_ready}");
        return ExitCode::from(EXIT_FAILURE);
    }
    eprintln!("error: {e:#}");
    ExitCode::from(EXIT_FAILURE)
}
