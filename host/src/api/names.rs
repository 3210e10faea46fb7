//! Every label, annotation, finalizer, field manager and Lease name the konnector writes,
//! spelled once. The spec fixes these strings; changing one breaks running installations.

/// Label on every object the konnector manages on the provider (and on the autoBind binding).
pub const MANAGED_LABEL: &str = "core.kbind.io/managed";
/// Label on a provider CRD that makes it an exported API.
pub const EXPORTED_LABEL: &str = "core.kbind.io/exported";
/// Annotation on a provider copy: the UID of the consumer cluster that owns it.
pub const CONSUMER_CLUSTER_UID_ANNOTATION: &str = "core.kbind.io/consumer-cluster-uid";
/// Annotation on a provider copy: the UID of the consumer object it was copied from.
pub const CONSUMER_OBJECT_UID_ANNOTATION: &str = "core.kbind.io/consumer-object-uid";
/// Label on a provider copy: the UID of the consumer cluster that wrote it. The provider watch
/// selects on it so that a konnector caches its own copies only, however many consumers share
/// the provider; ownership is still decided by the two UID annotations, never by this label.
pub const CONSUMER_CLUSTER_LABEL: &str = "core.kbind.io/consumer-cluster";
/// Annotation on a provider copy placed elsewhere than its consumer object (an isolation
/// strategy other than `None`): the consumer object's namespace. With
/// [`CONSUMER_NAME_ANNOTATION`] it maps the copy back to its object.
pub const CONSUMER_NAMESPACE_ANNOTATION: &str = "core.kbind.io/consumer-namespace";
/// Annotation on a provider copy placed elsewhere than its consumer object: the consumer
/// object's name.
pub const CONSUMER_NAME_ANNOTATION: &str = "core.kbind.io/consumer-name";
/// Annotation on a consumer instance whose provider target is owned by someone else.
pub const CONFLICT_ANNOTATION: &str = "core.kbind.io/conflict";
/// Annotation on a consumer instance choosing what happens to its provider copy on delete.
pub const DELETION_POLICY_ANNOTATION: &str = "core.kbind.io/deletion-policy";
/// The only value of [`DELETION_POLICY_ANNOTATION`] that changes behaviour.
pub const DELETION_POLICY_ORPHAN: &str = "Orphan";
/// Annotation on a related Secret/ConfigMap copy: the UID of the binding that wrote it.
pub const RELATED_BINDING_ANNOTATION: &str = "core.kbind.io/related-binding";
/// Annotation on a related copy: sha256 of the payload fields it was written with, so a
/// metadata-only list tells whether its source's payload differs.
pub const RELATED_DIGEST_ANNOTATION: &str = "core.kbind.io/related-digest";
/// Annotation on a related copy: the resourceVersion of the source it was written from, so an
/// unchanged source is not read again.
pub const RELATED_SOURCE_VERSION_ANNOTATION: &str = "core.kbind.io/related-source-version";
/// Annotation on a consumer CRD installed from a provider: the Connection it is pinned to.
pub const CONNECTION_ANNOTATION: &str = "core.kbind.io/connection";
/// Annotation on a consumer CRD installed from a provider: the provider cluster's UID at
/// install, so a Connection to the same cluster may take the CRD over once its own is gone.
pub const PROVIDER_CLUSTER_UID_ANNOTATION: &str = "core.kbind.io/provider-cluster-uid";
/// Annotation on a consumer CRD that serves fewer versions than the provider: which versions
/// were left out and why, repeated in binding readiness and the Connection's SchemaInSync.
pub const VERSIONS_LEFT_OUT_ANNOTATION: &str = "core.kbind.io/versions-left-out";

/// Finalizer on a consumer instance, placed before its first provider write.
pub const SYNCER_FINALIZER: &str = "core.kbind.io/syncer";
/// Finalizer on Connections, their credential Secrets, Bindings and ClusterBindings.
pub const CLEANUP_FINALIZER: &str = "core.kbind.io/cleanup";

/// Field manager for bound instance spec (provider) and status (consumer) writes.
pub const FIELD_MANAGER: &str = "kbind-konnector";
/// Field manager for related Secret/ConfigMap copies.
pub const RELATED_FIELD_MANAGER: &str = "kbind-konnector-related";

/// Default consumer-side leader-election Lease name.
pub const LEADER_ELECTION_ID: &str = "konnector.kbind.io";
/// Namespace of the provider heartbeat Lease when the kubeconfig context names none.
pub const DEFAULT_HEARTBEAT_NAMESPACE: &str = "kbind";
/// Duration written into the provider heartbeat Lease.
pub const HEARTBEAT_LEASE_SECONDS: i32 = 60;
/// The konnector's designated namespace for credential Secrets, unless configured otherwise.
pub const DEFAULT_SECRET_NAMESPACE: &str = "kbind";
/// Data key of the kubeconfig in a credential Secret when the reference names none.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// The label selector of the provider copies consumer cluster `consumer_cluster_uid` wrote.
pub fn own_copies_selector(consumer_cluster_uid: &str) -> String {
    format!("{CONSUMER_CLUSTER_LABEL}={consumer_cluster_uid}")
}

/// Name of the provider heartbeat Lease: Connection name, `-`, first ten characters of the
/// consumer cluster UID.
pub fn heartbeat_lease_name(connection: &str, consumer_cluster_uid: &str) -> String {
    let prefix: String = consumer_cluster_uid.chars().take(10).collect();
    format!("{connection}-{prefix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_lease_is_named_after_connection_and_uid_prefix() {
        assert_eq!(
            heartbeat_lease_name("provider", "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"),
            "provider-0f1e2d3c-4"
        );
    }

    #[test]
    fn heartbeat_lease_name_keeps_short_uids_whole() {
        assert_eq!(heartbeat_lease_name("p", "abc"), "p-abc");
    }
}
