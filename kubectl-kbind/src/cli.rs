//! The command line: kubectl-style global flags and one subcommand per operator task; the
//! dispatcher at the top of the crate (every arrow points down from here: commands, the
//! shared argument types in `args`, the exit codes in `exit`).

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::args::CompletionArgs;
use crate::client::ClientArgs;
use crate::commands::{bind, connect, disconnect, provider_rbac, provider_setup, status, unbind};
use crate::exit::{EXIT_FAILURE, exit_code};

/// What `--version` prints: the workspace version and the commit the build was made from
/// (`unknown` outside `make release`, which stamps it).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KBIND_GIT_COMMIT"),
    ")"
);

/// Connect provider clusters, bind their APIs and inspect or tear down kbind.
#[derive(Parser, Debug)]
#[command(name = "kubectl-kbind", bin_name = "kubectl kbind", version = VERSION)]
pub struct Cli {
    /// Cluster connection flags, as kubectl's.
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
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

const COMPLETION_EXAMPLES: &str = "Examples:
  # Load completion for this bash session
  source <(kubectl-kbind completion bash)

  # Install it for zsh
  kubectl-kbind completion zsh > \"${fpath[1]}/_kubectl-kbind\"";

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Store a provider kubeconfig in a Secret and create a Connection; wait for Ready.
    #[command(after_help = CONNECT_EXAMPLES)]
    Connect(connect::ConnectArgs),
    /// Create a Binding (or ClusterBinding) for exported APIs; wait for Ready.
    #[command(after_help = BIND_EXAMPLES)]
    Bind(bind::BindArgs),
    /// Show Connections → exported APIs → bindings → instance counts; exit 1 when unhealthy.
    Status(status::StatusArgs),
    /// Delete a Binding or ClusterBinding and follow its drain until it is gone.
    Unbind(unbind::UnbindArgs),
    /// Delete a Connection after its bindings, then its credential Secret.
    Disconnect(disconnect::DisconnectArgs),
    /// Print the provider-side RBAC the konnector needs, as YAML for `kubectl apply -f -`.
    #[command(after_help = RBAC_EXAMPLES)]
    ProviderRbac(provider_rbac::RbacArgs),
    /// Create (or --rotate) the provider ServiceAccount, its RBAC and token; write its kubeconfig.
    ProviderSetup(provider_setup::ProviderSetupArgs),
    /// Print the shell completion script of kubectl-kbind (bash, zsh, fish, powershell, elvish).
    #[command(after_help = COMPLETION_EXAMPLES)]
    Completion(CompletionArgs),
}

/// Writes the completion script for `shell`, generated from this very definition so it never
/// drifts from the flags.
pub fn completion(shell: clap_complete::Shell, out: &mut impl std::io::Write) {
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-kbind", out);
}

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

/// Runs one parsed command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::ProviderRbac(args) => {
            provider_rbac::run(&args, cli.client.namespace.as_deref()).await
        }
        Command::Connect(args) => connect::run(&cli.client, args).await,
        Command::Bind(args) => bind::run(&cli.client, args).await,
        Command::Status(args) => status::run(&cli.client, args).await,
        Command::Unbind(args) => unbind::run(&cli.client, args).await,
        Command::Disconnect(args) => disconnect::run(&cli.client, args).await,
        Command::ProviderSetup(args) => provider_setup::run(&cli.client, args).await,
        Command::Completion(args) => {
            completion(args.shell, &mut std::io::stdout());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

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
    fn the_bash_completion_script_completes_every_subcommand() -> anyhow::Result<()> {
        let mut out = Vec::new();
        completion(clap_complete::Shell::Bash, &mut out);
        let text = String::from_utf8(out)?;
        assert!(text.contains("kubectl-kbind"), "{text}");
        for subcommand in [
            "connect",
            "bind",
            "status",
            "unbind",
            "disconnect",
            "provider-rbac",
        ] {
            assert!(text.contains(subcommand), "{subcommand} missing");
        }
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
