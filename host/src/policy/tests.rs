//! The policy set's own behaviour: warm instances, recycling, limits and the built-in
//! placement through [`Policies`].

use super::*;
use crate::api::ConflictPolicy;

fn ask(target: Option<OwnershipMarkers>) -> ConflictInput {
    ConflictInput {
        consumer_cluster_uid: "consumer".into(),
        consumer_object_uid: "object".into(),
        conflict_policy: ConflictPolicy::Fail,
        target,
    }
}

fn foreign() -> Option<OwnershipMarkers> {
    Some(OwnershipMarkers {
        cluster_uid: Some("another".into()),
        object_uid: Some("theirs".into()),
    })
}

fn policies() -> Policies {
    Policies::builtin().unwrap_or_else(|e| panic!("built-in policies: {e}"))
}

#[tokio::test]
async fn warm_instance_serves_the_next_call() {
    let policies = policies().with_instance_reuse(DEFAULT_REUSE);
    for _ in 0..3 {
        let decision = policies.decide_conflict(&ask(None)).await;
        assert!(
            matches!(decision, Ok(ConflictDecision::Create)),
            "{decision:?}"
        );
        assert_eq!(policies.current().conflict.pool.idle(), 1);
    }
}

#[tokio::test]
async fn instance_is_recycled_after_its_reuse_count() {
    let policies = policies().with_instance_reuse(2);
    let first = policies.decide_conflict(&ask(None)).await;
    assert!(first.is_ok(), "{first:?}");
    assert_eq!(policies.current().conflict.pool.idle(), 1);
    let second = policies.decide_conflict(&ask(None)).await;
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(
        policies.current().conflict.pool.idle(),
        0,
        "an instance that served its calls is dropped"
    );
}

#[tokio::test]
async fn failed_call_drops_its_instance() {
    // An answer of 4 bytes at most: `create` lifts no string, a conflict's message does.
    let policies = policies().with_limits(PolicyLimits {
        max_output_bytes: 4,
        ..PolicyLimits::DEFAULT
    });
    let created = policies.decide_conflict(&ask(None)).await;
    assert!(created.is_ok(), "{created:?}");
    assert_eq!(policies.current().conflict.pool.idle(), 1);
    let refused = policies.decide_conflict(&ask(foreign())).await;
    assert!(
        matches!(refused, Err(PolicyError::OutputTooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(policies.current().conflict.pool.idle(), 0);
}

#[tokio::test]
async fn other_limits_start_without_warm_instances() {
    let policies = policies();
    let decision = policies.decide_conflict(&ask(None)).await;
    assert!(decision.is_ok(), "{decision:?}");
    let relimited = policies.with_limits(PolicyLimits::DEFAULT);
    assert_eq!(relimited.current().conflict.pool.idle(), 0);
}

fn placement_question(strategy: crate::api::IsolationStrategy) -> PlacementInput {
    PlacementInput {
        consumer_cluster_uid: "consumer".into(),
        connection: "provider".into(),
        api: PlacementApi {
            group: "example.org".into(),
            resource: "widgets".into(),
            kind: "Widget".into(),
            scope: crate::api::ResourceScope::Namespaced,
        },
        namespace: Some("team-a".into()),
        name: "w1".into(),
        isolation: crate::api::IsolationInForce {
            strategy,
            prefix: "east".into(),
        },
    }
}

#[tokio::test]
async fn the_built_in_placement_answers_on_a_warm_instance() {
    use crate::api::IsolationStrategy::{Namespaced, Prefixed};
    let policies = policies().with_instance_reuse(DEFAULT_REUSE);
    let placed = policies.place(&placement_question(Namespaced)).await;
    let expected = Placement {
        namespace: Some("east-team-a".into()),
        name: "w1".into(),
    };
    assert_eq!(placed.ok(), Some(expected));
    assert_eq!(policies.current().placement.pool.idle(), 1);
    let placed = policies.place(&placement_question(Prefixed)).await;
    let expected = Placement {
        namespace: Some("team-a".into()),
        name: "east-w1".into(),
    };
    assert_eq!(placed.ok(), Some(expected));
    assert_eq!(&*policies.origin(PolicyRole::Placement), "built-in");
}

#[tokio::test]
async fn a_placement_the_module_cannot_make_is_rejected() {
    let mut question = placement_question(crate::api::IsolationStrategy::None);
    question.namespace = None;
    let refused = policies().place(&question).await;
    assert!(
        matches!(&refused, Err(PolicyError::PolicyRejected { role: PolicyRole::Placement, message, .. })
            if message.contains("has no namespace")),
        "{refused:?}"
    );
}
