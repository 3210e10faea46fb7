//! One module per subcommand: its flags and its `run`, calling down into the shared argument
//! types, the plans and the cluster helpers.

pub mod bind;
pub mod connect;
pub mod disconnect;
pub mod provider_rbac;
pub mod provider_setup;
pub mod status;
pub mod unbind;
