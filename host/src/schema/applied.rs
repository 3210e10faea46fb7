//! What kbind last applied per (Connection, API): a provider schema that has not changed
//! since, over a consumer CRD nobody else changed since, is not applied again; one whose
//! discovered revision has not changed is not even read again.
//!
//! ```text
//! discovered revision (CRD uid/generation, OpenAPI hashes) ─┐
//! consumer CRD resourceVersion ─────────────────────────────┴▶ same as last time? ─▶ no read
//! provider source (CRD spec / OpenAPI facts) ──hash──┐
//! consumer CRD resourceVersion ─────────────────────┴─▶ same as last apply? ──▶ nothing to do
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The memory of applied schemas; cheap to clone, shared by the binding controllers.
#[derive(Clone, Default)]
pub struct AppliedSchemas {
    inner: Arc<Mutex<HashMap<(String, String), Applied>>>,
}

impl std::fmt::Debug for AppliedSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppliedSchemas").finish_non_exhaustive()
    }
}

/// One applied schema.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Applied {
    /// Hash of the provider source it was built from.
    source: String,
    /// The consumer CRD's resourceVersion once it was Established after the apply.
    resource_version: Option<String>,
    /// The provider schema's discovered revision the source was read at, if known.
    revision: Option<String>,
}

impl AppliedSchemas {
    /// Whether `existing` is what kbind applied for this source, untouched since.
    pub fn unchanged(
        &self,
        connection: &str,
        api: &str,
        source: &str,
        existing: &CustomResourceDefinition,
    ) -> bool {
        self.untouched_since(connection, api, existing, |applied| {
            applied.source == source
        })
    }

    /// Whether `existing` is what kbind applied from the provider schema at `revision`,
    /// untouched since: the provider schema need not be read.
    pub fn unchanged_revision(
        &self,
        connection: &str,
        api: &str,
        revision: &str,
        existing: &CustomResourceDefinition,
    ) -> bool {
        self.untouched_since(connection, api, existing, |applied| {
            applied.revision.as_deref() == Some(revision)
        })
    }

    /// Whether the last apply for (`connection`, `api`) is `same` and left `existing` as it is
    /// now (same resourceVersion: nobody wrote the CRD since).
    fn untouched_since(
        &self,
        connection: &str,
        api: &str,
        existing: &CustomResourceDefinition,
        same: impl Fn(&Applied) -> bool,
    ) -> bool {
        let Ok(map) = self.inner.lock() else {
            return false;
        };
        map.get(&(connection.to_owned(), api.to_owned()))
            .is_some_and(|applied| {
                same(applied)
                    && applied.resource_version.is_some()
                    && applied.resource_version == existing.metadata.resource_version
            })
    }

    /// Remembers an apply of `source`, read at `revision`, that left `installed` Established.
    pub fn record(
        &self,
        connection: &str,
        api: &str,
        source: &str,
        revision: Option<&str>,
        installed: &CustomResourceDefinition,
    ) {
        if let Ok(mut map) = self.inner.lock() {
            map.insert(
                (connection.to_owned(), api.to_owned()),
                Applied {
                    source: source.to_owned(),
                    resource_version: installed.metadata.resource_version.clone(),
                    revision: revision.map(str::to_owned),
                },
            );
        }
    }

    /// Forgets an API, so the next call applies again (after a failure, say).
    pub fn forget(&self, connection: &str, api: &str) {
        if let Ok(mut map) = self.inner.lock() {
            map.remove(&(connection.to_owned(), api.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(rv: Option<&str>) -> CustomResourceDefinition {
        let mut crd = CustomResourceDefinition::default();
        crd.metadata.resource_version = rv.map(str::to_owned);
        crd
    }

    #[test]
    fn same_source_over_untouched_crd_is_unchanged() {
        let applied = AppliedSchemas::default();
        applied.record("p", "widgets.example.org", "h1", None, &crd(Some("7")));
        assert!(applied.unchanged("p", "widgets.example.org", "h1", &crd(Some("7"))));
    }

    #[test]
    fn new_provider_source_is_applied_again() {
        let applied = AppliedSchemas::default();
        applied.record("p", "widgets.example.org", "h1", None, &crd(Some("7")));
        assert!(!applied.unchanged("p", "widgets.example.org", "h2", &crd(Some("7"))));
    }

    #[test]
    fn consumer_crd_changed_by_someone_else_is_applied_again() {
        let applied = AppliedSchemas::default();
        applied.record("p", "widgets.example.org", "h1", None, &crd(Some("7")));
        assert!(!applied.unchanged("p", "widgets.example.org", "h1", &crd(Some("9"))));
    }

    #[test]
    fn another_connection_has_its_own_memory() {
        let applied = AppliedSchemas::default();
        applied.record("p", "widgets.example.org", "h1", None, &crd(Some("7")));
        assert!(!applied.unchanged("q", "widgets.example.org", "h1", &crd(Some("7"))));
        applied.forget("p", "widgets.example.org");
        assert!(!applied.unchanged("p", "widgets.example.org", "h1", &crd(Some("7"))));
    }

    #[test]
    fn an_unchanged_revision_over_an_untouched_crd_needs_no_read() {
        let applied = AppliedSchemas::default();
        let api = "widgets.example.org";
        applied.record("p", api, "h1", Some("uid/1"), &crd(Some("7")));
        assert!(applied.unchanged_revision("p", api, "uid/1", &crd(Some("7"))));
        assert!(
            !applied.unchanged_revision("p", api, "uid/2", &crd(Some("7"))),
            "new revision"
        );
        assert!(
            !applied.unchanged_revision("p", api, "uid/1", &crd(Some("8"))),
            "CRD edited"
        );
        applied.record("p", api, "h1", None, &crd(Some("7")));
        assert!(
            !applied.unchanged_revision("p", api, "uid/1", &crd(Some("7"))),
            "unknown"
        );
    }
}
