//! The label sets of the konnector's metrics: one typed struct per set, so a label is named
//! once and every value comes from an explicit choice, never from `Debug` output.

use prometheus_client::encoding::EncodeLabelSet;

/// Labels of per-controller metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `connection`, `binding`, `clusterbinding`, `sync`.
    pub controller: &'static str,
}

/// Labels of per-API metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    /// `<plural>.<group>`.
    pub api: String,
}

/// Labels of syncer watch metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// `<plural>.<group>`.
    pub api: String,
    /// `consumer` or `provider`.
    pub cluster: &'static str,
}

/// Labels of policy call metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// `schema`, `conflict`, `related`, `placement`.
    pub role: &'static str,
}

/// Labels of the module serving a policy role.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyModuleLabels {
    /// `schema`, `conflict`, `related`, `placement`.
    pub role: &'static str,
    /// `built-in`, the file path, or the registry reference as configured.
    pub reference: String,
    /// `sha256:...`: of the component, or of the manifest for a registry module.
    pub digest: String,
    /// The Connection that chose this module (`spec.policies`); empty for the process-wide one.
    pub connection: String,
}

/// Labels of live policy module swaps.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicySwapLabels {
    /// `schema`, `conflict`, `related`, `placement`.
    pub role: &'static str,
    /// `swapped` or `failed` (the running module stayed).
    pub result: &'static str,
}

/// Labels of policy failures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyFailureLabels {
    /// `schema`, `conflict`, `related`, `placement`.
    pub role: &'static str,
    /// `trap`, `timeout`, `memory`, `invalid-output`, ...
    pub kind: &'static str,
}

/// Labels of related-resource metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RelatedLabels {
    /// `secrets` or `configmaps`.
    pub resource: &'static str,
    /// `FromProvider` or `FromConsumer`.
    pub direction: &'static str,
    /// Why a copy was skipped: `foreign-target` (the target carries another binding's marker
    /// or none) or `secret-type` (a source Secret type the host does not copy).
    pub reason: &'static str,
}

/// Labels of related-resource reads: how much of the objects a request carried.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RelatedReadLabels {
    /// `secrets` or `configmaps`.
    pub resource: &'static str,
    /// `list-metadata` (a page of metadata-only objects) or `get-full` (one object with its
    /// payload, read because it is to be copied).
    pub read: &'static str,
}

/// Labels of shard metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardKindLabels {
    /// `connection` or `api`.
    pub kind: &'static str,
}

/// Labels of shard hand-overs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandoverLabels {
    /// `connection` or `api`.
    pub kind: &'static str,
    /// `acquired`, `released` (handed over cleanly) or `lost` (renewals failed, or another
    /// replica holds the Lease).
    pub change: &'static str,
}

/// Labels of the build info.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    /// The workspace version.
    pub version: &'static str,
    /// The git commit it was built from (`unknown` outside a checkout).
    pub commit: &'static str,
}

/// Labels of client requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientRequestLabels {
    /// `consumer` or `provider`.
    pub cluster: &'static str,
    /// `get`, `watch`, `create`, `update`, `patch`, `delete` (from the method and query).
    pub verb: &'static str,
    /// The HTTP status code, or `error` when no answer came.
    pub code: String,
}

/// Labels of client retries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientRetryLabels {
    /// `consumer` or `provider`.
    pub cluster: &'static str,
    /// What the retried attempt got: its HTTP status code, or `error` when no answer came.
    pub code: String,
}

/// Labels of client request latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientLatencyLabels {
    /// `consumer` or `provider`.
    pub cluster: &'static str,
    /// As in [`ClientRequestLabels`].
    pub verb: &'static str,
}

/// Labels of instance counts by state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstanceStateLabels {
    /// `<plural>.<group>`.
    pub api: String,
    /// `synced`, `conflicting`, `failing` or `pending`.
    pub state: &'static str,
}

/// Labels of work-queue metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkQueueLabels {
    /// The controller whose queue it is (`sync`).
    pub controller: &'static str,
    /// `<plural>.<group>`.
    pub api: String,
}
