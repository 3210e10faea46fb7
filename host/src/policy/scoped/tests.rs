//! The per-Connection modules' behaviour: chosen, kept, refused, dropped, and retried on
//! their schedule.

use super::*;
use crate::api::{IsolationInForce, IsolationStrategy, ResourceScope};
use crate::policy::{PlacementApi, PlacementInput};

fn question(connection: &str) -> PlacementInput {
    PlacementInput {
        consumer_cluster_uid: "consumer".into(),
        connection: connection.into(),
        api: PlacementApi {
            group: "example.org".into(),
            resource: "widgets".into(),
            kind: "Widget".into(),
            scope: ResourceScope::Namespaced,
        },
        namespace: Some("team-a".into()),
        name: "w1".into(),
        isolation: IsolationInForce {
            strategy: IsolationStrategy::Prefixed,
            prefix: "east".into(),
        },
    }
}

fn schedule() -> RetrySchedule {
    RetrySchedule::default()
}

fn builtin_choice(settings: &str) -> Result<Choice, crate::policy::SettingsError> {
    Ok(Choice {
        reference: PolicyRef::Builtin,
        settings: settings.parse()?,
    })
}

#[tokio::test]
async fn a_module_that_cannot_be_had_fails_its_connection_only_and_never_falls_back()
-> anyhow::Result<()> {
    let policies = Policies::builtin()?;
    let oci: PolicyRef = "oci://registry.example/acme/placement:v1".parse()?;
    let wanted = Choice {
        reference: oci,
        settings: PolicySettings::default(),
    };
    let outcome = policies
        .choose("a", PolicyRole::Placement, Some(wanted), None, &schedule())
        .await;
    assert!(
        matches!(
            outcome,
            ChoiceOutcome::Unavailable(Failed {
                error: Some(ChoiceError::NoFetcher { .. }),
                ..
            })
        ),
        "{outcome:?}"
    );
    let refused = policies.for_connection("a").place(&question("a")).await;
    assert!(
        matches!(refused, Err(PolicyError::Unavailable { .. })),
        "{refused:?}"
    );
    let other = policies.for_connection("b").place(&question("b")).await?;
    assert_eq!(other.name, "east-w1");
    assert_eq!(
        policies.connection_modules_of("a"),
        vec![ConnectionModule {
            role: PolicyRole::Placement,
            reference: "oci://registry.example/acme/placement:v1".into(),
            digest: None,
        }]
    );
    Ok(())
}

#[tokio::test]
async fn a_failing_change_keeps_the_module_running_and_a_file_path_is_refused() -> anyhow::Result<()>
{
    let policies = Policies::builtin()?;
    let first = policies
        .choose(
            "a",
            PolicyRole::Placement,
            Some(builtin_choice("{}")?),
            None,
            &schedule(),
        )
        .await;
    assert!(matches!(first, ChoiceOutcome::Swapped), "{first:?}");
    let again = policies
        .choose(
            "a",
            PolicyRole::Placement,
            Some(builtin_choice("{}")?),
            None,
            &schedule(),
        )
        .await;
    assert!(matches!(again, ChoiceOutcome::Unchanged), "{again:?}");
    let refused = policies
        .choose(
            "a",
            PolicyRole::Placement,
            Some(builtin_choice(r#"{"zone": "eu-1"}"#)?),
            None,
            &schedule(),
        )
        .await;
    assert!(
        matches!(
            &refused,
            ChoiceOutcome::KeptOld(Failed {
                error: Some(ChoiceError::Policy(PolicyError::SettingsRejected { .. })),
                ..
            })
        ),
        "{refused:?}"
    );
    let file = Choice {
        reference: PolicyRef::File("/etc/kbind/placement.wasm".into()),
        settings: PolicySettings::default(),
    };
    let refused = policies
        .choose("a", PolicyRole::Placement, Some(file), None, &schedule())
        .await;
    assert!(
        matches!(
            &refused,
            ChoiceOutcome::KeptOld(Failed {
                error: Some(ChoiceError::FilePath { .. }),
                ..
            })
        ),
        "{refused:?}"
    );
    // The module chosen first still answers for the Connection.
    let placed = policies.for_connection("a").place(&question("a")).await?;
    assert_eq!(placed.name, "east-w1");
    let dropped = policies
        .choose("a", PolicyRole::Placement, None, None, &schedule())
        .await;
    assert!(matches!(dropped, ChoiceOutcome::Swapped), "{dropped:?}");
    assert!(!policies.for_connection("a").chooses(PolicyRole::Placement));
    Ok(())
}

/// Whether the outcome is the Connection's module unavailable, and whether an attempt was
/// made for it (`Some(true)`) or it waited for its next one (`Some(false)`).
fn attempted(outcome: &ChoiceOutcome) -> Option<bool> {
    match outcome {
        ChoiceOutcome::Unavailable(failed) => Some(failed.error.is_some()),
        _ => None,
    }
}

#[tokio::test]
async fn a_module_that_cannot_be_had_is_asked_for_again_only_when_its_next_attempt_is_due()
-> anyhow::Result<()> {
    let policies = Policies::builtin()?;
    let wanted = |tag: &str| -> anyhow::Result<Choice> {
        Ok(Choice {
            reference: format!("oci://registry.example/acme/placement:{tag}").parse()?,
            settings: PolicySettings::default(),
        })
    };
    let choose = |choice: Choice, schedule: RetrySchedule| {
        let policies = policies.clone();
        async move {
            policies
                .choose("a", PolicyRole::Placement, Some(choice), None, &schedule)
                .await
        }
    };
    let first = choose(wanted("v1")?, schedule()).await;
    assert_eq!(attempted(&first), Some(true), "{first:?}");
    let waited = choose(wanted("v1")?, schedule()).await;
    assert_eq!(attempted(&waited), Some(false), "{waited:?}");
    let said = match &waited {
        ChoiceOutcome::Unavailable(failed) => failed.to_string(),
        other => format!("{other:?}"),
    };
    assert!(
        said.contains("pulls no modules") && said.contains("attempt 1 failed; next attempt at"),
        "the last failure and the next attempt: {said}"
    );
    // A changed reference is tried at once, starting the schedule again.
    let changed = choose(wanted("v2")?, schedule()).await;
    assert_eq!(attempted(&changed), Some(true), "{changed:?}");
    // Once due (a failure scheduled with a zero delay here), the same reference is tried
    // again, one failure more.
    let due = RetrySchedule {
        first: std::time::Duration::ZERO,
        cap: std::time::Duration::ZERO,
    };
    let _ = choose(wanted("v3")?, due).await;
    let again = choose(wanted("v3")?, due).await;
    match &again {
        ChoiceOutcome::Unavailable(Failed {
            error: Some(_),
            retry,
        }) => assert_eq!(retry.failures, 2, "{retry:?}"),
        other => panic!("not tried again: {other:?}"),
    }
    Ok(())
}
