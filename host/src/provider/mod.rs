//! Everything about talking to a provider cluster: turning a kubeconfig Secret into a client,
//! reading cluster identities, discovering exported APIs, and the engagement registry that
//! hands Ready Connections' clients to the binding and sync machinery.

mod engagement;

pub use engagement::{Engagement, Engagements};
