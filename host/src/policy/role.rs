//! The four policy roles and the WIT world each one implements.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A decision the konnector delegates to a WebAssembly component.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyRole {
    /// Discovery facts + OpenAPI v3 → CustomResourceDefinition.
    #[value(name = "schema", alias = "schema-synthesis")]
    SchemaSynthesis,
    /// Ownership markers + conflictPolicy → create / update / adopt / conflict.
    #[value(name = "conflict", alias = "conflict-policy")]
    ConflictPolicy,
    /// relatedResources entry + objects → copy / skip / delete.
    #[value(name = "related", alias = "related-selection")]
    RelatedSelection,
    /// Consumer object + isolation settings → provider namespace and name of its copy.
    #[value(name = "placement", alias = "placement-policy")]
    Placement,
}

impl PolicyRole {
    /// Every role.
    pub const ALL: [PolicyRole; 4] = [
        Self::SchemaSynthesis,
        Self::ConflictPolicy,
        Self::RelatedSelection,
        Self::Placement,
    ];

    /// The world a module for this role implements (modules built against the previous
    /// version, `@0.1.0`, load too).
    pub fn world(self) -> &'static str {
        match self {
            Self::SchemaSynthesis => "kbind:policy/schema-synthesis@0.2.0",
            Self::ConflictPolicy => "kbind:policy/conflict-policy@0.2.0",
            Self::RelatedSelection => "kbind:policy/related-selection@0.2.0",
            Self::Placement => "kbind:policy/placement-policy@0.2.0",
        }
    }

    /// The role's name as used in flags and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::SchemaSynthesis => "schema-synthesis",
            Self::ConflictPolicy => "conflict-policy",
            Self::RelatedSelection => "related-selection",
            Self::Placement => "placement-policy",
        }
    }
}

impl fmt::Display for PolicyRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
