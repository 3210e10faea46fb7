//! The argument types more than one command shares: waiting, output, and the value enums and
//! parsers of flags that `connect`, `bind` and `provider-rbac` have in common.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{ArgAction, Args};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use konnector::api::{
    IsolationStrategy, RelatedDirection, RelatedResource, RelatedResourceKind, RelatedSelector,
};

use crate::output::OutputFormat;

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

/// `-o json|yaml|name` for commands that print objects.
#[derive(Args, Debug, Clone, Copy)]
pub struct OutputArgs {
    /// Print the resulting object(s) as json, yaml or kind.group/name instead of a human summary.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
}

/// `--schema-source` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Source {
    /// CRDs labelled as exported, else OpenAPI.
    #[value(name = "Auto", alias = "auto")]
    Auto,
    /// CRDs labelled `core.kbind.io/exported: "true"`.
    #[value(name = "CRD", alias = "crd")]
    Crd,
    /// Discovery and `/openapi/v3`.
    #[value(name = "OpenAPI", alias = "openapi")]
    OpenApi,
}

/// `--pull-policy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Pull {
    /// When a binding lists the API.
    #[value(name = "Bound", alias = "bound")]
    Bound,
    /// Every exported API at once.
    #[value(name = "All", alias = "all")]
    All,
    /// Never: CRDs are managed outside kbind.
    #[value(name = "None", alias = "none")]
    None,
}

/// `--isolation` values (and `provider-rbac --isolation`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsolationArg {
    /// Namespaces and names unchanged.
    #[value(name = "None", alias = "none")]
    None,
    /// Namespace `<prefix>-<namespace>`, names unchanged.
    #[value(name = "Namespaced", alias = "namespaced")]
    Namespaced,
    /// Namespace unchanged, names `<prefix>-<name>`.
    #[value(name = "Prefixed", alias = "prefixed")]
    Prefixed,
}

impl From<IsolationArg> for IsolationStrategy {
    fn from(arg: IsolationArg) -> Self {
        match arg {
            IsolationArg::None => Self::None,
            IsolationArg::Namespaced => Self::Namespaced,
            IsolationArg::Prefixed => Self::Prefixed,
        }
    }
}

/// `--update-policy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Update {
    /// Follow provider changes.
    #[value(name = "Always", alias = "always")]
    Always,
    /// Pinned at first pull.
    #[value(name = "Once", alias = "once")]
    Once,
}

/// Parses one `--related` value.
pub fn parse_related(spec: &str) -> Result<RelatedResource, String> {
    let mut parts = spec.split(':');
    let resource = match parts.next() {
        Some("secrets") => RelatedResourceKind::Secrets,
        Some("configmaps") => RelatedResourceKind::Configmaps,
        other => return Err(format!("expected secrets or configmaps, got {other:?}")),
    };
    let direction = match parts.next() {
        Some("FromProvider") => RelatedDirection::FromProvider,
        Some("FromConsumer") => RelatedDirection::FromConsumer,
        other => {
            return Err(format!(
                "expected FromProvider or FromConsumer, got {other:?}"
            ));
        }
    };
    let mut selector = RelatedSelector::default();
    for part in parts {
        match part.split_once('=') {
            Some(("names", names)) => {
                selector.names = names
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect();
            }
            Some(("labels", labels)) => {
                let mut match_labels = BTreeMap::new();
                for pair in labels.split(',').filter(|p| !p.is_empty()) {
                    let (k, v) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("label {pair:?} is not key=value"))?;
                    match_labels.insert(k.to_string(), v.to_string());
                }
                selector.label_selector = Some(LabelSelector {
                    match_labels: Some(match_labels),
                    match_expressions: None,
                });
            }
            _ => return Err(format!("expected names=a,b or labels=k=v, got {part:?}")),
        }
    }
    Ok(RelatedResource {
        group: String::new(),
        resource,
        direction,
        selector,
    })
}

/// Flags of `completion`.
#[derive(Args, Debug, Clone, Copy)]
pub struct CompletionArgs {
    /// The shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}
