//! The fixed counts one store may hold (linear memories, tables, their elements, core
//! instances), and which of them a module ran into, for the error that says so. The counts
//! are constants, not flags: a component needs a handful of each, and anything far beyond
//! that is a module trying to grow the konnector's memory another way.

/// Core module instances one store may create. A component built by `cargo build --target
/// wasm32-wasip2` instantiates a handful (the module, the WASI adapter, shims).
pub const MAX_INSTANCES: usize = 32;
/// Linear memories one store may hold (toolchains emit one, the WASI adapter none or one).
pub const MAX_MEMORIES: usize = 4;
/// Tables one store may hold.
pub const MAX_TABLES: usize = 32;
/// Elements one table may grow to.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Which store bound a module ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxResource {
    /// Number of linear memories ([`MAX_MEMORIES`]).
    Memories,
    /// Number of tables ([`MAX_TABLES`]).
    Tables,
    /// Number of core instances ([`MAX_INSTANCES`]).
    Instances,
    /// Elements of one table ([`MAX_TABLE_ELEMENTS`]).
    TableElements,
}

impl SandboxResource {
    /// The bound, as configured.
    pub fn limit(self) -> usize {
        match self {
            Self::Memories => MAX_MEMORIES,
            Self::Tables => MAX_TABLES,
            Self::Instances => MAX_INSTANCES,
            Self::TableElements => MAX_TABLE_ELEMENTS,
        }
    }

    /// What is counted, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Self::Memories => "linear memories",
            Self::Tables => "tables",
            Self::Instances => "instances",
            Self::TableElements => "elements in one table",
        }
    }

    /// The resource a wasmtime "resource limit exceeded: {desc} count too high" error names.
    /// wasmtime checks these counts itself when it instantiates a module; its message is the
    /// only trace of which count it was (a test pins the wording).
    pub(crate) fn from_wasmtime_message(message: &str) -> Option<Self> {
        let desc = message
            .strip_prefix("resource limit exceeded: ")?
            .split(" count too high")
            .next()?;
        match desc {
            "memory" => Some(Self::Memories),
            "table" => Some(Self::Tables),
            "instance" => Some(Self::Instances),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wasmtime_count_errors_name_their_resource() {
        let of = SandboxResource::from_wasmtime_message;
        assert_eq!(
            of("resource limit exceeded: memory count too high at 5"),
            Some(SandboxResource::Memories)
        );
        assert_eq!(
            of("resource limit exceeded: table count too high at 33"),
            Some(SandboxResource::Tables)
        );
        assert_eq!(
            of("resource limit exceeded: instance count too high at 33"),
            Some(SandboxResource::Instances)
        );
        assert_eq!(of("something else"), None);
    }
}
