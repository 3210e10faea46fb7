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

/// The filter directives for `--log-level`. A bare level at info or quieter also quiets
/// kube-runtime's controller to warnings: what it has at info is its per-reconcile span
/// (`reconciling object`), whose fields are formatted for every reconcile, about a tenth of an
/// idle konnector's CPU at 333 resyncs a second, and which says less than kbind's own spans.
/// Anything more (`debug`, directives) is taken as written.
fn directives(level: &str) -> String {
    let bare = level.trim().to_ascii_lowercase();
    if matches!(bare.as_str(), "info" | "warn" | "error" | "off") {
        format!("{bare},kube_runtime::controller=warn")
    } else {
        level.to_string()
    }
}

/// Installs the global subscriber. `level` is an env-filter directive (`info`,
/// `konnector=debug,kube=info`); `RUST_LOG` overrides it when set.
pub fn init_logging(level: &str, format: LogFormat) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(directives(level)))
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

#[cfg(test)]
mod tests {
    use super::directives;

    #[test]
    fn a_bare_level_quiets_kube_runtimes_per_reconcile_span() {
        assert_eq!(directives("info"), "info,kube_runtime::controller=warn");
        assert_eq!(directives(" WARN "), "warn,kube_runtime::controller=warn");
    }

    #[test]
    fn debug_and_directives_are_taken_as_written() {
        assert_eq!(directives("debug"), "debug");
        assert_eq!(
            directives("konnector=debug,kube=info"),
            "konnector=debug,kube=info"
        );
    }
}
