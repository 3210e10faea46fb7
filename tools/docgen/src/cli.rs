//! The command-line references, from the clap definitions the binaries parse with: every
//! command and subcommand with its description, usage, flags (value, default, choices,
//! environment variable) and examples.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::{GENERATED, cell, escape};

/// `kubectl kbind`, from `kubectl_kbind::cli::Cli`.
pub fn kubectl_kbind() -> String {
    let intro = "The `kubectl kbind` plugin (binary `kubectl-kbind`). Global flags (`--kubeconfig`, \
                 `--context`, `-n`) address the consumer cluster unless a command says otherwise. \
                 Exit codes: 0 done, 1 failed or not ready, 2 usage error.";
    page("kubectl kbind", intro, kubectl_kbind::cli::Cli::command())
}

/// `konnector`, with the flags of `run` and `policy` from their own types.
pub fn konnector() -> String {
    let intro = "The `konnector` binary: the controller process (`run`, what the chart's \
                 Deployment starts), the core CRD manifests (`crds`) and the policy tools \
                 (`policy eval`, `policy test`).";
    page("konnector", intro, konnector::cli::Cli::command())
}

fn page(title: &str, intro: &str, mut root: Command) -> String {
    root.build();
    let mut out = format!("{GENERATED}\n\n# {title}\n\n{intro}\n");
    section(&mut out, &root, title, true);
    out
}

/// One command's section, then its subcommands'.
fn section(out: &mut String, command: &Command, path: &str, root: bool) {
    if !root {
        let _ = write!(out, "\n## {path}\n");
    }
    let about = command
        .get_long_about()
        .or(command.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    if !about.is_empty() {
        let _ = write!(out, "\n{}\n", escape(&about));
    }
    let usage = command
        .clone()
        .bin_name(path)
        .render_usage()
        .to_string()
        .replace("Usage: ", "");
    let _ = write!(out, "\n```text\n{usage}\n```\n");
    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|a| {
            !a.is_hide_set()
                && !matches!(
                    a.get_action(),
                    ArgAction::Help
                        | ArgAction::HelpShort
                        | ArgAction::HelpLong
                        | ArgAction::Version
                )
        })
        .filter(|a| root || !a.is_global_set())
        .collect();
    if !args.is_empty() {
        out.push_str("\n| flag | value | default | description |\n|---|---|---|---|\n");
        for arg in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                flag(arg),
                value(arg),
                default(arg),
                description(arg)
            );
        }
    }
    if let Some(after) = command.get_after_help() {
        let _ = write!(out, "\n```text\n{}\n```\n", after.to_string().trim_end());
    }
    let subcommands: Vec<&Command> = command
        .get_subcommands()
        .filter(|c| c.get_name() != "help")
        .collect();
    if !subcommands.is_empty() && root {
        out.push_str("\n| command | what it does |\n|---|---|\n");
        for sub in &subcommands {
            let name = format!("{path} {}", sub.get_name());
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let _ = writeln!(out, "| [`{name}`](#{}) | {} |", anchor(&name), cell(&about));
        }
    }
    for sub in subcommands {
        section(out, sub, &format!("{path} {}", sub.get_name()), false);
    }
}

/// The heading id mdBook gives a heading made of words and spaces.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

fn flag(arg: &Arg) -> String {
    if arg.is_positional() {
        let name = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.to_string())
            .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
        return format!("`{name}` (argument)");
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("`-{short}`"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("`--{long}`"));
    }
    names.join(", ")
}

fn value(arg: &Arg) -> String {
    if !arg.get_action().takes_values() {
        return String::new();
    }
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !choices.is_empty() && arg.get_value_names().is_none() {
        return choices.join(", ");
    }
    let names = arg
        .get_value_names()
        .map(|n| {
            n.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
    let repeat = if matches!(arg.get_action(), ArgAction::Append) {
        " (repeatable)"
    } else {
        ""
    };
    if choices.is_empty() {
        format!("`{names}`{repeat}")
    } else {
        format!("`{names}`: {}{repeat}", choices.join(", "))
    }
}

fn default(arg: &Arg) -> String {
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    defaults.join(", ")
}

fn description(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let mut text = cell(&help);
    if !text.is_empty() && !text.ends_with(['.', '!', '?', ')']) {
        text.push('.');
    }
    if arg.is_required_set() {
        text.push_str(" Required.");
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(text, " Environment: `{}`.", env.to_string_lossy());
    }
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kubectl_kbind_subcommand_has_a_section_and_a_link_to_it() {
        let page = kubectl_kbind();
        for sub in kubectl_kbind::cli::Cli::command().get_subcommands() {
            let heading = format!("## kubectl kbind {}", sub.get_name());
            assert!(page.contains(&heading), "no {heading}");
            let link = format!("(#kubectl-kbind-{})", sub.get_name());
            assert!(page.contains(&link), "no {link}");
        }
    }

    #[test]
    fn the_konnector_page_lists_run_flags_with_their_environment_variables() {
        let page = konnector();
        assert!(page.contains("## konnector run"));
        assert!(page.contains("`--kubeconfig`"));
        assert!(
            page.contains("Environment: `KBIND_CONFLICT_POLICY`"),
            "{page}"
        );
    }

    #[test]
    fn the_examples_after_a_command_are_kept_as_written() {
        let page = kubectl_kbind();
        assert!(
            page.contains("kubectl kbind bind widgets.example.org --connection provider -n team-a")
        );
    }
}
