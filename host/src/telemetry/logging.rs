//! Logging set-up: `tracing` with an env-filter level and text or JSON output; text is
//! coloured only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Installs the global subscriber. `level` is an env-filter directive (`info`,
/// `konnector=debug,kube=info`); `RUST_LOG` overrides it when set.
pub fn init_logging(level: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .map_err(|e| format!("invalid --log-level {level:?}: {e}"))?;
    // Colour codes only where a person reads them: a Pod's log (what `kubectl logs` and log
    // shippers see) is a pipe or a file, where ANSI escapes are noise.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| format!("installing the logger: {e}"))
}
