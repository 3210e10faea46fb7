//! Kubernetes client idioms, written once: what an API error means, the namespaced-or-cluster
//! `Api` of a dynamic resource, creating a namespace that may already exist, removing one
//! finalizer without touching anyone else's, server-side applying a typed object's status,
//! and a Warning Event.
//!
//! Error classification uses kube-rs's own `Status` predicates (they follow client-go's
//! `apierrors`), so an AlreadyExists is never mistaken for an update conflict although both
//! are HTTP 409. Where the HTTP answer alone is what counts (a path the server does not serve
//! answers a plain-text 404 that carries no Status reason), the `is_http_*` predicates say so;
//! no other module compares status codes.

use http::StatusCode;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::names::FIELD_MANAGER;

/// How a failed request reads to an operator: what to tell them to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFailure {
    /// Refused by RBAC: grant the identity that was refused.
    Forbidden,
    /// No answer from the cluster: retrying, check the endpoint and network.
    Unreachable,
    /// Refused for another reason, or no request behind the failure at all.
    Other,
}

/// `error` (the request failure behind some operation's failure, if any) as an operator reads
/// it.
pub fn request_failure(error: Option<&kube::Error>) -> RequestFailure {
    match error {
        Some(e) if e.is_forbidden() => RequestFailure::Forbidden,
        Some(kube::Error::Api(_)) | None => RequestFailure::Other,
        Some(_) => RequestFailure::Unreachable,
    }
}

/// What an API error says, in client-go's vocabulary.
pub trait ApiErrorExt {
    /// The object does not exist (404).
    fn is_not_found(&self) -> bool;
    /// A create found the object already there (409, reason AlreadyExists).
    fn is_already_exists(&self) -> bool;
    /// A precondition or resourceVersion no longer holds, or an apply conflicts (409).
    fn is_conflict(&self) -> bool;
    /// The credentials may not do this (403).
    fn is_forbidden(&self) -> bool;
    /// The server's validation refused the object (422, reason Invalid).
    fn is_invalid(&self) -> bool;
    /// The server answered 404, whatever the body: also a path it does not serve at all (an
    /// API group it lacks), whose plain-text answer carries no Status reason.
    fn is_http_not_found(&self) -> bool;
    /// The server answered 403, whatever the body.
    fn is_http_forbidden(&self) -> bool;
    /// The server answered 409, whatever the reason (AlreadyExists or Conflict).
    fn is_http_conflict(&self) -> bool;
    /// The server refused the object itself, so sending it again cannot succeed: invalid (400,
    /// 422), too large (413), or a spec whose types do not fit the server's schema, which
    /// server-side apply reports as a 500 "failed to create typed patch object".
    fn is_rejected_object(&self) -> bool;
    /// The failure may pass on its own, so the same request is worth sending again after a
    /// while: no answer at all (connection refused, reset, timed out) or the server shedding
    /// or failing (429, 5xx). Every other answer (403, 404, 401, 422, ...) is definitive.
    fn is_transient(&self) -> bool;
    /// How long the server asked the client to wait before sending again (a 429's or 503's
    /// `retryAfterSeconds`), if it said.
    fn retry_after(&self) -> Option<std::time::Duration>;
}

impl ApiErrorExt for kube::Error {
    fn is_not_found(&self) -> bool {
        matches!(self, kube::Error::Api(s) if s.is_not_found())
    }
    fn is_already_exists(&self) -> bool {
        matches!(self, kube::Error::Api(s) if s.is_already_exists())
    }
    fn is_conflict(&self) -> bool {
        matches!(self, kube::Error::Api(s) if s.is_conflict())
    }
    fn is_forbidden(&self) -> bool {
        matches!(self, kube::Error::Api(s) if s.is_forbidden())
    }
    fn is_invalid(&self) -> bool {
        matches!(self, kube::Error::Api(s) if s.is_invalid())
    }
    fn is_http_not_found(&self) -> bool {
        answered(self, StatusCode::NOT_FOUND)
    }
    fn is_http_forbidden(&self) -> bool {
        answered(self, StatusCode::FORBIDDEN)
    }
    fn is_http_conflict(&self) -> bool {
        answered(self, StatusCode::CONFLICT)
    }
    fn is_rejected_object(&self) -> bool {
        [
            StatusCode::BAD_REQUEST,
            StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::UNPROCESSABLE_ENTITY,
        ]
        .into_iter()
        .any(|code| answered(self, code))
            || matches!(self, kube::Error::Api(s)
                if s.code == StatusCode::INTERNAL_SERVER_ERROR.as_u16()
                    && s.message.starts_with("failed to create typed patch object"))
    }
    fn is_transient(&self) -> bool {
        match self {
            kube::Error::Api(s) => {
                s.code == StatusCode::TOO_MANY_REQUESTS.as_u16()
                    || (StatusCode::INTERNAL_SERVER_ERROR.as_u16()..600).contains(&s.code)
                        && !self.is_rejected_object()
            }
            kube::Error::HyperError(_)
            | kube::Error::Service(_)
            | kube::Error::ReadEvents(_)
            | kube::Error::HttpError(_) => true,
            _ => false,
        }
    }
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            kube::Error::Api(s) => s
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|&seconds| seconds > 0)
                .map(|seconds| std::time::Duration::from_secs(u64::from(seconds))),
            _ => None,
        }
    }
}

/// How long a cluster asked us to wait before trying again (a 429's or 503's
/// `retryAfterSeconds`, once the client's own retries gave up): read from the first client
/// error in `error`'s source chain, however many of our error types wrap it.
pub fn retry_after_in(error: &(dyn std::error::Error + 'static)) -> Option<std::time::Duration> {
    std::iter::successors(Some(error), |e| e.source())
        .find_map(|e| e.downcast_ref::<kube::Error>())
        .and_then(ApiErrorExt::retry_after)
}

/// Whether `error` is the server's answer with HTTP status `code`.
fn answered(error: &kube::Error, code: StatusCode) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code.as_u16())
}

/// The `Api` for objects of `ar` in `namespace` (namespaced resources) or cluster-wide
/// (cluster-scoped resources, or every namespace when `namespace` is `None`).
pub fn dynamic_api<K>(
    client: &Client,
    ar: &ApiResource,
    namespaced: bool,
    namespace: Option<&str>,
) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match (namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    }
}

/// How [`ensure_namespace`] found the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    /// It was created now.
    Created,
    /// It already existed.
    Existed,
    /// The credentials may not create namespaces; whether it exists is unknown, and the
    /// write that follows will tell (spec: "the engine attempts a create even if the
    /// namespace may already exist").
    CreateForbidden,
}

/// Creates namespace `name` unless it exists: one create attempt, no read first.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<NamespaceState, kube::Error> {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => Ok(NamespaceState::Created),
        Err(e) if e.is_already_exists() => Ok(NamespaceState::Existed),
        Err(e) if e.is_forbidden() => Ok(NamespaceState::CreateForbidden),
        Err(e) => Err(e),
    }
}

/// Parameters of the konnector's merge and JSON patches: its field manager named, so that
/// `managedFields` says `kbind-konnector` owns the finalizer and annotations it writes on an
/// object a GitOps tool owns, instead of a name derived from the client's user agent.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Removes `finalizer` from `obj` by index, with a JSON patch `test` so that a concurrent
/// change of the list fails the patch instead of removing someone else's finalizer. An
/// object already gone, or without the finalizer, is fine.
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = obj.finalizers().iter().position(|f| f == finalizer) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch = serde_json::from_value(json!([
        { "op": "test", "path": path, "value": finalizer },
        { "op": "remove", "path": path },
    ]))
    .map_err(kube::Error::SerdeError)?;
    match api
        .patch(&obj.name_any(), &patch_params(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Server-side applies `status` to the status subresource of `obj` as the konnector's field
/// manager, forcing ownership of the fields it sets.
pub async fn apply_status<K>(
    api: &Api<K>,
    obj: &K,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let namespace = obj.namespace();
    apply_status_as(
        api,
        &obj.name_any(),
        namespace.as_deref(),
        FIELD_MANAGER,
        status,
    )
    .await
}

/// The head of a server-side apply of `K` named `name` (in `namespace`): apiVersion, kind and
/// the identifying metadata, and nothing else, so the manager claims only what is added to it.
pub fn apply_head<K: Resource<DynamicType = ()>>(
    name: &str,
    namespace: Option<&str>,
) -> serde_json::Value {
    let mut metadata = json!({ "name": name });
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": metadata,
    })
}

/// Server-side applies `status` to the status subresource of `name` (in `namespace`) as field
/// manager `manager`, forcing ownership of the fields it sets.
pub async fn apply_status_as<K>(
    api: &Api<K>,
    name: &str,
    namespace: Option<&str>,
    manager: &str,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut body = apply_head::<K>(name, namespace);
    body["status"] = json!(status);
    let params = PatchParams::apply(manager).force();
    api.patch_status(name, &params, &Patch::Apply(&body)).await
}

/// A Warning Event: `reason` (CamelCase), a note saying what happened and what to do, and the
/// `action` the controller was taking. The recorder folds Events of one object with the same
/// type, reason and action into one series that keeps its first note for about six minutes,
/// so two different stories with the same reason need different actions.
pub fn warning(reason: &str, note: String, action: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(event_note(note)),
        action: action.to_string(),
        secondary: None,
    }
}

/// The longest Event note the apiserver accepts, in bytes (it counts UTF-8 bytes).
pub const MAX_EVENT_NOTE: usize = 1024;

/// `note` cut to [`MAX_EVENT_NOTE`] bytes on a character boundary (ending in `…` when cut): a
/// longer note makes the apiserver refuse the whole Event (a client error's text easily
/// passes 1 KiB), and the condition beside it keeps the whole message.
pub fn event_note(note: String) -> String {
    if note.len() <= MAX_EVENT_NOTE {
        return note;
    }
    let mut end = MAX_EVENT_NOTE - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = note[..end].to_string();
    cut.push('…');
    cut
}

/// Errors as an apiserver answers them, for the tests of every module that classifies one.
#[cfg(test)]
pub(crate) mod testing {
    /// An API error with this status code and reason.
    pub(crate) fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("refused", reason).with_code(code),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn event_notes_are_cut_to_what_the_apiserver_accepts() {
        assert_eq!(event_note("short".into()), "short");
        for long in ["é".repeat(2000), "e".repeat(2000)] {
            let cut = event_note(long);
            assert!(
                cut.len() <= MAX_EVENT_NOTE && cut.len() > MAX_EVENT_NOTE - 4,
                "{}",
                cut.len()
            );
            assert!(cut.ends_with('…'));
        }
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("m", reason).with_code(code)))
    }

    #[test]
    fn already_exists_is_not_an_update_conflict() {
        let exists = api_error(409, "AlreadyExists");
        assert!(exists.is_already_exists());
        assert!(!exists.is_conflict());
        let conflict = api_error(409, "Conflict");
        assert!(conflict.is_conflict());
        assert!(!conflict.is_already_exists());
    }

    #[test]
    fn not_found_and_forbidden_are_recognised() {
        assert!(api_error(404, "NotFound").is_not_found());
        assert!(api_error(403, "Forbidden").is_forbidden());
        assert!(!kube::Error::LinesCodecMaxLineLengthExceeded.is_not_found());
    }

    #[test]
    fn http_predicates_go_by_the_code_whatever_the_body() {
        let plain = api_error(404, "Failed to parse error data");
        assert!(plain.is_http_not_found());
        assert!(!plain.is_not_found());
        assert!(api_error(403, "Failed to parse error data").is_http_forbidden());
        assert!(api_error(409, "AlreadyExists").is_http_conflict());
        assert!(api_error(409, "Conflict").is_http_conflict());
    }

    #[test]
    fn rejected_objects_are_invalid_too_large_or_untyped() {
        assert!(api_error(400, "BadRequest").is_rejected_object());
        assert!(api_error(413, "RequestEntityTooLarge").is_rejected_object());
        assert!(api_error(422, "Invalid").is_rejected_object());
        let untyped = kube::Error::Api(Box::new(
            Status::failure(
                "failed to create typed patch object (x): y",
                "InternalError",
            )
            .with_code(500),
        ));
        assert!(untyped.is_rejected_object());
        assert!(!api_error(500, "InternalError").is_rejected_object());
        assert!(!api_error(409, "Conflict").is_rejected_object());
    }

    #[test]
    fn shedding_and_silence_are_transient_answers_are_not() {
        for code in [429, 500, 502, 503, 504] {
            assert!(api_error(code, "x").is_transient(), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 422] {
            assert!(!api_error(code, "x").is_transient(), "{code}");
        }
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(kube::Error::Service(Box::new(refused)).is_transient());
        let untyped = kube::Error::Api(Box::new(
            Status::failure(
                "failed to create typed patch object (x): y",
                "InternalError",
            )
            .with_code(500),
        ));
        assert!(
            !untyped.is_transient(),
            "a refused object fails the same way again"
        );
    }

    #[test]
    fn retry_after_is_read_from_the_status_details() {
        let mut status = Status::failure("too many requests", "TooManyRequests").with_code(429);
        assert_eq!(
            kube::Error::Api(Box::new(status.clone())).retry_after(),
            None
        );
        status.details = Some(kube::core::response::StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 3,
        });
        let error = kube::Error::Api(Box::new(status));
        assert_eq!(error.retry_after(), Some(std::time::Duration::from_secs(3)));
        // However deep our own error types wrap it.
        let wrapped = kube::runtime::finalizer::Error::ApplyFailed(error);
        assert_eq!(
            retry_after_in(&wrapped),
            Some(std::time::Duration::from_secs(3))
        );
        let unrelated = std::io::Error::other("no client error inside");
        assert_eq!(retry_after_in(&unrelated), None);
    }
}
