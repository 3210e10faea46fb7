//! What a teardown leaves behind, checked from one list: a test names each object it expects
//! gone, kept or released (by client, kind and `namespace/name`) instead of one lookup and one
//! assertion per object.

use kube::api::{ApiResource, DeleteParams, DynamicObject};
use kube::{Api, Client, Resource};

use super::{WAIT, holds_syncer_finalizer};

/// What a teardown should have left of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Nothing: deleted (or never there).
    Gone,
    /// The object, not being deleted.
    Kept,
    /// The object, not being deleted, without the syncer's finalizer: a released instance.
    Released,
}

/// One expectation: on `client`, the object of `kind` at `namespace/name` (or `name` when
/// cluster-scoped) is left as said.
pub type Remains<'a> = (&'a Client, ApiResource, &'a str, Left);

/// The dynamic resource of a typed kind, for [`Remains`] rows.
pub fn kind<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The API holding the object at `path`, and the object's name.
fn at<'p>(client: &Client, kind: &ApiResource, path: &'p str) -> (Api<DynamicObject>, &'p str) {
    match path.split_once('/') {
        Some((namespace, name)) => (Api::namespaced_with(client.clone(), namespace, kind), name),
        None => (Api::all_with(client.clone(), kind), path),
    }
}

/// Fails unless every row holds; the error lists each row that does not, with what is there.
pub async fn expect_left(rows: &[Remains<'_>]) -> anyhow::Result<()> {
    let mut wrong = Vec::new();
    for (client, kind, path, left) in rows {
        let (api, name) = at(client, kind, path);
        let found = api.get_opt(name).await?;
        let live = |o: &DynamicObject| o.metadata.deletion_timestamp.is_none();
        let holds = match (left, &found) {
            (Left::Gone, found) => found.is_none(),
            (Left::Kept, Some(o)) => live(o),
            (Left::Released, Some(o)) => live(o) && !holds_syncer_finalizer(o),
            (_, None) => false,
        };
        if !holds {
            let seen = found.map(|o| (o.metadata.deletion_timestamp, o.metadata.finalizers));
            wrong.push(format!("{} {path} not {left:?}: {seen:?}", kind.kind));
        }
    }
    anyhow::ensure!(wrong.is_empty(), "left behind: {}", wrong.join("; "));
    Ok(())
}

/// Waits until every row holds (for effects a test does not wait for otherwise).
pub async fn wait_left(rows: &[Remains<'_>]) -> anyhow::Result<()> {
    crate::eventually(WAIT, || expect_left(rows)).await
}

/// Deletes the object of `kind` at `path` and waits until it is gone, its finalizers done: one
/// step of a teardown.
pub async fn delete_gone(client: &Client, kind: ApiResource, path: &str) -> anyhow::Result<()> {
    let (api, name) = at(client, &kind, path);
    api.delete(name, &DeleteParams::default()).await?;
    wait_left(&[(client, kind, path, Left::Gone)]).await
}
