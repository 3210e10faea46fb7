//! Hands the commit the plugin is built from to the crate as `KBIND_GIT_COMMIT`, for its
//! `--version`. `make release` sets the variable from git; any other build says `unknown`
//! rather than a commit that a cached build script may have read before the last commit.

fn main() {
    println!("cargo:rerun-if-env-changed=KBIND_GIT_COMMIT");
    let commit = std::env::var("KBIND_GIT_COMMIT").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=KBIND_GIT_COMMIT={commit}");
}
