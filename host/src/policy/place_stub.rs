//! Temporary stand-in for the placement role until the Wasm module lands.

use super::{Placement, PlacementInput, Policies, PolicyError};
use crate::api::{IsolationStrategy, ResourceScope};

impl Policies {
    /// Places a consumer object on the provider.
    pub async fn place(&self, input: &PlacementInput) -> Result<Placement, PolicyError> {
        let prefix = &input.isolation.prefix;
        let namespaced = input.api.scope == ResourceScope::Namespaced;
        Ok(match (input.isolation.strategy, namespaced) {
            (IsolationStrategy::None, _) => Placement {
                namespace: input.namespace.clone(),
                name: input.name.clone(),
            },
            (IsolationStrategy::Namespaced, true) => Placement {
                namespace: input.namespace.as_ref().map(|ns| format!("{prefix}-{ns}")),
                name: input.name.clone(),
            },
            (IsolationStrategy::Namespaced, false) | (IsolationStrategy::Prefixed, _) => {
                Placement {
                    namespace: input.namespace.clone(),
                    name: format!("{prefix}-{}", input.name),
                }
            }
        })
    }
}
