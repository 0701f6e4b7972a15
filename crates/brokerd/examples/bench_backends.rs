//! N calls of read_file through `BwrapRuntime` and, in the same run, N bare `bwrap` runs of the
//! same argument list, with p50/p95 and the ratio: what the runtime adds to bubblewrap.
//!
//!   cargo run --release -p brokerd --example bench_backends -- [N] [TOOLS_ROOT]
//!
//! Without TOOLS_ROOT a tools root is built in a temporary directory from the musl toolkit
//! (target/x86_64-unknown-linux-musl/release/toolkit) and /bin/busybox. Limits are not
//! enforced (enforce_limits = false), as on a host without cgroup v2 delegation.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brokerd::config;
use brokerd::runner::bwrap::{BwrapRuntime, RootLayout};
use brokerd::runner::{Mount, RunSpec, Runner};
use proto::tools::ToolName;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let n: usize = match args.next() {
        Some(a) => a.parse().map_err(|e| format!("N: {e}"))?,
        None => 200,
    };
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = match args.next() {
        Some(r) => PathBuf::from(r),
        None => build_root(tmp.path())?,
    };
    let home = tmp.path().join("home");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let file = work.join("notes.txt");
    std::fs::write(&file, "a line of notes\n".repeat(64)).map_err(|e| e.to_string())?;

    let text = format!(
        "[runner]\nbackend = \"bwrap\"\nenforce_limits = false\nhome = \"{}\"\n\n[bwrap]\ntools_root = \"{}\"\n",
        home.display(),
        root.display()
    );
    let cfg = config::parse(&text, "bench.toml").map_err(|e| e.to_string())?;
    let (Some(rc), Some(bc)) = (cfg.runner.as_ref(), cfg.bwrap.as_ref()) else {
        return Err("the bench config has no [runner] or [bwrap]".into());
    };
    let rt = BwrapRuntime::new(rc, bc);
    let spec = RunSpec {
        session: proto::ident::Ident::fixed("bench"),
        call: proto::ident::Ident::fixed("c"),
        tool: ToolName::ReadFile,
        input: serde_json::to_vec(&serde_json::json!({ "path": file }))
            .map_err(|e| e.to_string())?,
        mounts: vec![Mount::at(&work, false).map_err(|e| e.to_string())?],
        egress: None,
        timeout: Duration::from_secs(30),
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    };
    let layout = RootLayout::read(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let argv = rt.build_argv(&spec, "boxmaker-bench-c-0", &layout, None);

    // One warm-up of each, so the page cache holds bwrap, toolkit and busybox.
    rt.run(&spec).map_err(|e| format!("runtime: {e}"))?;
    bare(&argv, &spec)?;

    let mut runtime_ms = Vec::with_capacity(n);
    let mut bare_ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        rt.run(&spec).map_err(|e| format!("runtime: {e}"))?;
        runtime_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        bare(&argv, &spec)?;
        bare_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (rp50, rp95) = percentiles(&mut runtime_ms);
    let (bp50, bp95) = percentiles(&mut bare_ms);
    println!("read_file, {n} calls each, ms");
    println!("{:<24} {:>8} {:>8}", "", "p50", "p95");
    println!("{:<24} {rp50:>8.2} {rp95:>8.2}", "BwrapRuntime::run");
    println!("{:<24} {bp50:>8.2} {bp95:>8.2}", "bare bwrap, same argv");
    println!(
        "{:<24} {:>8.2} {:>8.2}",
        "ratio runtime/bare",
        rp50 / bp50,
        rp95 / bp95
    );
    Ok(())
}

/// bwrap with the runtime's argument list, the JSON on standard input, output read to the end.
fn bare(argv: &[std::ffi::OsString], spec: &RunSpec) -> Result<(), String> {
    let input = &spec.input;
    let mut cmd = Command::new("bwrap");
    cmd.args(argv)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The argument list says `--seccomp 3`: the bare run gets the same filter.
    let _filter = brokerd::runner::seccomp::pass_to(&mut cmd).map_err(|e| e.to_string())?;
    // The grant's directories by descriptor, as the argument list binds them.
    let fds = brokerd::runner::mounts::open_mounts(&spec.mounts).map_err(|e| e.to_string())?;
    let _mounts = brokerd::runner::mounts::pass_to(&mut cmd, fds).map_err(|e| e.to_string())?;
    let mut child = cmd.spawn().map_err(|e| format!("bwrap: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "bare bwrap exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn percentiles(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.95))
}

fn build_root(dir: &Path) -> Result<PathBuf, String> {
    let toolkit = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/x86_64-unknown-linux-musl/release/toolkit");
    let root = dir.join("tools-root");
    for d in ["bin", "etc", "proc", "dev", "tmp", "run", "sys"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| e.to_string())?;
    }
    std::fs::copy(&toolkit, root.join("bin/toolkit")).map_err(|e| {
        format!(
            "{}: {e}; cargo build --release --target x86_64-unknown-linux-musl -p toolkit",
            toolkit.display()
        )
    })?;
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))
        .map_err(|e| format!("/bin/busybox: {e}"))?;
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).map_err(|e| e.to_string())?;
    Ok(root)
}
