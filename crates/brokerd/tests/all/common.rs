//! Helpers shared by the integration tests: the captured log, the argument lists' mounts,
//! specs and golden files (Podman's and bwrap's), and the fake `podman` scripts' start.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use brokerd::runner::protected::Over;
use brokerd::runner::{DirId, Egress, Mount, RunSpec};
use proto::tools::ToolName;

/// Everything brokerd logs in this test process from the first call on, as tracing's fmt layer
/// writes it: every field, as the journald layer would send it.
pub fn captured_log() -> &'static Mutex<Vec<u8>> {
    static LOG: std::sync::OnceLock<&'static Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct Sink(&'static Mutex<Vec<u8>>);
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(log))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        log
    })
}

/// The Podman tests' image `localhost/<name>`, pinned by a digest as brokerd's config requires.
pub fn image(name: &str) -> String {
    format!(
        "localhost/{name}@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    )
}

/// A grant directory to mount, for an argument list: Podman's names the path, bwrap's binds a
/// descriptor in the mounts' order; which directory it is, is checked at run time.
pub fn mount(path: &str, write: bool) -> Mount {
    Mount {
        path: PathBuf::from(path),
        write,
        id: DirId { dev: 0, ino: 0 },
        protect: false,
        stage: None,
    }
}

/// Call `c1` of session `s1`, the argument lists' golden files' call.
pub fn spec(tool: ToolName, mounts: Vec<Mount>, egress: Option<Egress>) -> RunSpec {
    RunSpec {
        session: proto::ident::Ident::fixed("s1"),
        call: proto::ident::Ident::fixed("c1"),
        tool,
        input: b"{}".to_vec(),
        mounts,
        egress,
        timeout: Duration::from_secs(30),
        staged_limit: None,
        toolset: None,
        limits: Default::default(),
        cache: None,
    }
}

/// The toolset of both backends' `shell-toolset` golden files: an image and a tree of its own.
pub fn toolset() -> brokerd::config::Toolset {
    brokerd::config::Toolset {
        name: "c".into(),
        image: image("boxmaker-toolset-c"),
        tree: Some("/var/lib/boxmaker/toolsets/c".into()),
        store_paths: None,
    }
}

/// The call of both backends' `shell-toolset` golden files: the `shell.args` call on a grant
/// with [`toolset`].
pub fn toolset_call() -> RunSpec {
    let mut spec = spec(
        ToolName::Shell,
        vec![mount("/srv/notes", true), mount("/srv/ref", false)],
        None,
    );
    spec.toolset = Some(toolset());
    spec
}

/// The call of both backends' `shell-cache` golden files: [`toolset_call`] on a grant with
/// a cache.
pub fn cache_call() -> RunSpec {
    let mut spec = toolset_call();
    spec.cache = Some(brokerd::runner::cache::Cache {
        dir: "/var/lib/boxmaker/caches/notes".into(),
        max_bytes: 1 << 30,
    });
    spec
}

/// The call of both backends' `shell-protected` golden files: a shell call with a writable and
/// a read-only grant directory, and the protected targets in the writable one (a pin, a
/// directory, a file).
pub fn protected_call() -> (RunSpec, [Over<'static>; 3]) {
    let spec = spec(
        ToolName::Shell,
        vec![mount("/srv/notes", true), mount("/srv/ref", false)],
        None,
    );
    let protected = [
        Over::pin(Path::new("/srv/notes/src")),
        Over::read_only(Path::new("/srv/notes/vendor")),
        Over::read_only(Path::new("/srv/notes/src/gen.rs")),
    ];
    (spec, protected)
}

/// The golden files' egress: a host, a pattern, and an IPv4 and an IPv6 range.
pub fn egress() -> Egress {
    Egress {
        hosts: vec!["docs.example.org".into(), "*.example.net".into()],
        allow_addresses: vec![
            "192.0.2.0/24".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ],
        bounds: None,
    }
}

/// `tests/fixtures/<dir>/<file>`.
pub fn golden_path(dir: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(file)
}

/// An argument list as its golden file holds it: one argument a line.
pub fn golden_lines(args: &[OsString]) -> Vec<u8> {
    let mut got = Vec::new();
    for a in args {
        got.extend_from_slice(a.as_bytes());
        got.push(b'\n');
    }
    got
}

/// `args` against `tests/fixtures/<dir>/<file>`, byte for byte (shown as text first, for a
/// readable diff).
pub fn assert_golden(dir: &str, file: &str, args: &[OsString]) {
    let path = golden_path(dir, file);
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let got = golden_lines(args);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{file}"
    );
    assert_eq!(got, want, "{file}: bytes differ");
}

/// A fake `podman` script from `template`, whose `@ARGS@` line becomes what every fake podman
/// reads from its arguments: `$name` from `--name=`, and `$egress_dir`, the host side of the
/// egress directory's volume.
pub fn fake_podman_script(template: &str) -> String {
    let mount = brokerd::runner::egress::EGRESS_MOUNT;
    let args = format!(
        r#"name=""
egress_dir=""
for a in "$@"; do
  case "$a" in
    --name=*) name="${{a#--name=}}" ;;
    --volume=*:{mount}:rw) egress_dir="${{a#--volume=}}"; egress_dir="${{egress_dir%:{mount}:rw}}" ;;
  esac
done
"#
    );
    assert!(
        template.contains("\n@ARGS@\n"),
        "a fake podman reads its arguments"
    );
    template.replace("@ARGS@\n", &args)
}

/// Writes `text` to `path` as an executable script.
pub fn write_script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}
