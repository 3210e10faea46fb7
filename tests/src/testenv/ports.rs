//! Free loopback ports for a cluster's listeners.
//!
//! A cluster keeps its ports for life (a restarted apiserver must come back where its clients
//! expect it), so ports are picked once and stored. They are drawn at random *below* the
//! kernel's ephemeral range: outgoing connections take their local port from that range and
//! could otherwise grab a stopped cluster's port before it starts again. Ports handed out in
//! this process are remembered, so two clusters started in parallel never get the same one.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

use super::{Error, Result};

/// The lowest port drawn.
const LOWEST: u16 = 10_000;

/// Picks `count` distinct ports that are free on 127.0.0.1 right now.
pub(crate) fn free_ports(count: usize) -> Result<Vec<u16>> {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let ceiling = ephemeral_low().max(LOWEST + 1_000);
    let mut ports = Vec::with_capacity(count);
    let mut attempts = 0;
    while ports.len() < count {
        attempts += 1;
        if attempts > 10_000 {
            return Err(Error::FreePort(std::io::Error::other(format!(
                "no free port in {LOWEST}..{ceiling}"
            ))));
        }
        let span = u64::from(ceiling - LOWEST);
        let offset = getrandom::u64().map_err(Error::Random)? % span;
        let port = LOWEST + u16::try_from(offset).unwrap_or(0);
        if handed_out.contains(&port) || TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            continue;
        }
        handed_out.push(port);
        ports.push(port);
    }
    Ok(ports)
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
