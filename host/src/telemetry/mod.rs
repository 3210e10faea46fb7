//! Telemetry: Prometheus metrics, the `/healthz` and `/readyz` process probes, and logging
//! set-up. Metrics live in one process-wide registry so every module records into it
//! without threading handles through every call.

mod labels;
mod logging;
mod metrics;
mod requests;
mod server;

pub use labels::{
    ApiLabels, BuildLabels, ClientLatencyLabels, ClientRequestLabels, ClientRetryLabels,
    ControllerLabels, HandoverLabels, InstanceStateLabels, PolicyFailureLabels, PolicyLabels,
    PolicyModuleLabels, PolicySwapLabels, RelatedLabels, RelatedReadLabels, ShardKindLabels,
    WatchLabels, WorkQueueLabels,
};
pub use logging::{LogFormat, init_logging};
pub use metrics::{Metrics, ReconcileTimer, metrics};
pub use requests::RequestMetrics;
pub use server::{Health, serve_health, serve_metrics};
