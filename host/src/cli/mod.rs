//! The `konnector` subcommands' implementations (`main.rs` only parses and dispatches).
//!
//! * `run`: the controller process.
//! * `policy eval`: run one module (built-in or a file) on one JSON input.
//! * `policy test`: run a folder of fixture cases and report like a test runner.

pub mod policy;
pub mod run;
