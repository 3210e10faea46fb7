//! What a teardown leaves behind, checked from one list: a test names each object it expects
//! gone, kept or released (by client, kind, namespace and name) instead of one lookup and one
//! assertion per object.

use kube::api::{ApiResource, DeleteParams, DynamicObject};
use kube::{Api, Client, Resource};

use super::{WAIT, holds_syncer_finalizer, wait_for};

/// What a teardown should have left of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Nothing: deleted (or never there).
    Gone,
    /// The object, not being deleted.
    Kept,
    /// The object, not being deleted and without the syncer's finalizer: an instance kbind
    /// let go of.
    Released,
}

/// One expectation: on `client`, the object of `kind` named `name` in `namespace` (`None`:
/// cluster-scoped) is left as said.
pub type Remains<'a> = (&'a Client, ApiResource, Option<&'a str>, &'a str, Left);

/// The dynamic resource of a typed kind, for [`Remains`] rows.
pub fn kind<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Objects of `kind` in `namespace`, or cluster-wide for `None`.
pub fn dynamic(client: &Client, kind: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, kind),
        None => Api::all_with(client.clone(), kind),
    }
}

/// Fails unless every row holds; the error lists each row that does not, with what is there.
pub async fn expect_left(rows: &[Remains<'_>]) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    for (client, kind, namespace, name, left) in rows {
        let found = dynamic(client, kind, *namespace).get_opt(name).await?;
        let live = |o: &DynamicObject| o.metadata.deletion_timestamp.is_none();
        let holds = match (left, &found) {
            (Left::Gone, found) => found.is_none(),
            (Left::Kept, Some(o)) => live(o),
            (Left::Released, Some(o)) => live(o) && !holds_syncer_finalizer(o),
            (_, None) => false,
        };
        if !holds {
            let ns = namespace.map(|ns| format!("{ns}/")).unwrap_or_default();
            let seen = found.map(|o| (o.metadata.deletion_timestamp, o.metadata.finalizers));
            wrong.push(format!("{} {ns}{name} not {left:?}: {seen:?}", kind.kind));
        }
    }
    anyhow::ensure!(wrong.is_empty(), "left behind: {}", wrong.join("; "));
    Ok(())
}

/// Waits until every row holds (for effects a test does not wait for otherwise).
pub async fn wait_left(rows: &[Remains<'_>]) -> anyhow::Result<()> {
    crate::eventually(WAIT, || expect_left(rows)).await
}

/// Deletes an object and waits until it is gone, its finalizers done: one step of a teardown.
pub async fn delete_gone(
    client: &Client,
    kind: ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<()> {
    let api = dynamic(client, &kind, namespace);
    api.delete(name, &DeleteParams::default()).await?;
    wait_for(&format!("{} {name} gone", kind.kind), WAIT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}
