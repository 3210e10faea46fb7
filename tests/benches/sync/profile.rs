//! `KBIND_BENCH_PROFILE=<file>`: `perf record` on the konnector process over the initial sync
//! (sampling at 499 Hz), so that a run names where its CPU per object goes. Read it with
//! `perf report -i <file> --no-children --sort dso,symbol`. Without the variable nothing is
//! recorded; when `perf` is missing the bench says so and runs on.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A `perf record` attached to one process, stopped (and its file written) on drop.
pub struct Profile {
    perf: Option<Child>,
}

impl Profile {
    /// Starts recording process `pid` into the file `KBIND_BENCH_PROFILE` names, if it names
    /// one.
    pub fn start(pid: u32) -> Self {
        let Some(file) = std::env::var_os("KBIND_BENCH_PROFILE").map(PathBuf::from) else {
            return Self { perf: None };
        };
        let perf = Command::new("perf")
            .args([
                "record",
                "--quiet",
                "-F",
                "499",
                "-p",
                &pid.to_string(),
                "-o",
            ])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn();
        match perf {
            Ok(child) => {
                eprintln!(
                    "bench: perf record on the konnector into {}",
                    file.display()
                );
                Self { perf: Some(child) }
            }
            Err(error) => {
                eprintln!("bench: no profile: perf did not start: {error}");
                Self { perf: None }
            }
        }
    }
}

impl Drop for Profile {
    /// SIGINT is how `perf record` is asked to write its file and exit.
    fn drop(&mut self) {
        if let Some(mut perf) = self.perf.take() {
            if let Ok(pid) = i32::try_from(perf.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
            }
            let _ = perf.wait();
        }
    }
}
