//! Real kube-apiserver test environment.
