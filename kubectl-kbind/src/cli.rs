//! The command line: kubectl-style global flags, one subcommand per operator task, and the
//! exit codes scripts rely on (0 done, 1 failed or not ready, 2 usage error).

use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::client::ClientArgs;
use crate::output::OutputFormat;

/// Exit code of a usage error (clap uses the same for parse errors).
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a failure or of something that is not ready.
pub const EXIT_FAILURE: u8 = 1;

/// Connect provider clusters, bind their APIs and inspect or tear down kbind.
#[derive(Parser, Debug)]
#[command(name = "kubectl-kbind", bin_name = "kubectl kbind", version)]
pub struct Cli {
    /// Cluster connection flags, as kubectl's.
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--wait` and `--timeout`, shared by every command that waits for the konnector.
#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Wait until the konnector reports the outcome (`--wait=false` returns after the write).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub wait: bool,
    /// How long to wait, e.g. `90s`, `2m`.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// `-o json|yaml` for commands that print objects.
#[derive(Args, Debug, Clone, Copy)]
pub struct OutputArgs {
    /// Print the resulting object(s) as json or yaml instead of a human summary.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

const CONNECT_EXAMPLES: &str = "Examples:
  # Store provider credentials in the konnector's namespace and connect
  kubectl kbind connect provider --provider-kubeconfig ./provider.kubeconfig

  # Bind every exported API automatically, reading schemas from OpenAPI
  kubectl kbind connect provider --provider-kubeconfig ./p.kubeconfig --auto-bind --schema-source OpenAPI";

const BIND_EXAMPLES: &str = "Examples:
  # Bind Widgets into namespace team-a
  kubectl kbind bind widgets.example.org --connection provider -n team-a

  # Bind cluster-wide, copying a provider Secret next to the instances
  kubectl kbind bind widgets.example.org --connection provider --cluster \\
    --related secrets:FromProvider:names=widget-creds";

const RBAC_EXAMPLES: &str = "Examples:
  # Least-privilege provider RBAC for the konnector's service account, applied on the provider
  kubectl kbind provider-rbac --subject-kind ServiceAccount --subject konnector -n kbind \\
    --api widgets.example.org --related secrets:FromProvider \\
    | kubectl --context provider apply -f -";

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Store a provider kubeconfig in a Secret and create a Connection; wait for Ready.
    #[command(after_help = CONNECT_EXAMPLES)]
    Connect(crate::connect::ConnectArgs),
    /// Create a Binding (or ClusterBinding) for exported APIs; wait for Ready.
    #[command(after_help = BIND_EXAMPLES)]
    Bind(crate::bind::BindArgs),
    /// Show Connections → exported APIs → bindings → instance counts; exit 1 when unhealthy.
    Status(crate::status::StatusArgs),
    /// Delete a Binding or ClusterBinding and follow its drain until it is gone.
    Unbind(crate::unbind::UnbindArgs),
    /// Delete a Connection after its bindings, then its credential Secret.
    Disconnect(crate::disconnect::DisconnectArgs),
    /// Print the provider-side RBAC the konnector needs, as YAML for `kubectl apply -f -`.
    #[command(after_help = RBAC_EXAMPLES)]
    ProviderRbac(crate::rbac::RbacArgs),
    /// Create (or --rotate) the provider ServiceAccount, its RBAC and token; write its kubeconfig.
    ProviderSetup(crate::provider_setup::ProviderSetupArgs),
}

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

/// Parses the command line, runs the command and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit_code(&e),
    }
}

/// Prints the error the way kubectl does and picks the exit code for it.
fn exit_code(e: &anyhow::Error) -> ExitCode {
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

/// Runs one parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::ProviderRbac(args) => {
            crate::rbac::run(&args, cli.client.namespace.as_deref()).await
        }
        Command::Connect(args) => crate::connect::run(&cli.client, args).await,
        Command::Bind(args) => crate::bind::run(&cli.client, args).await,
        Command::Status(args) => crate::status::run(&cli.client, args).await,
        Command::Unbind(args) => crate::unbind::run(&cli.client, args).await,
        Command::Disconnect(args) => crate::disconnect::run(&cli.client, args).await,
        Command::ProviderSetup(args) => crate::provider_setup::run(&cli.client, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::PathBuf;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_are_accepted_after_the_subcommand_as_in_kubectl() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from([
            "kubectl-kbind",
            "status",
            "--context",
            "consumer",
            "-n",
            "team-a",
            "--kubeconfig",
            "/tmp/k",
        ])?;
        assert_eq!(cli.client.context.as_deref(), Some("consumer"));
        assert_eq!(cli.client.namespace.as_deref(), Some("team-a"));
        assert_eq!(cli.client.kubeconfig, Some(PathBuf::from("/tmp/k")));
        Ok(())
    }

    #[test]
    fn wait_can_be_switched_off_kubectl_style() -> anyhow::Result<()> {
        let cli = Cli::try_parse_from([
            "kubectl-kbind",
            "unbind",
            "widgets",
            "--wait=false",
            "--timeout",
            "30s",
        ])?;
        let Command::Unbind(args) = cli.command else {
            anyhow::bail!("parsed another command");
        };
        assert!(!args.wait.wait);
        assert_eq!(args.wait.timeout, Duration::from_secs(30));
        Ok(())
    }
}
