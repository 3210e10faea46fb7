//! Readiness probes used while a cluster starts: etcd's `/health` over plain HTTP, and the
//! apiserver's `/readyz` through a real client with the admin identity (which also proves the
//! generated kubeconfig works). Each returns the failure as text for the start-up error.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

/// etcd's `/health` over plain HTTP on loopback.
pub(crate) fn etcd_health(port: u16) -> Result<(), String> {
    let timeout = Duration::from_secs(1);
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    if response.contains(r#""health":"true""#) {
        Ok(())
    } else {
        Err(format!(
            "etcd /health: {}",
            response.lines().last().unwrap_or("")
        ))
    }
}

/// The apiserver's `/readyz`, as the admin.
pub(crate) async fn readyz(client: &kube::Client) -> Result<(), String> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(2), client.request_text(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("/readyz: {e}")),
        Err(_) => Err("/readyz: timed out".to_string()),
    }
}
