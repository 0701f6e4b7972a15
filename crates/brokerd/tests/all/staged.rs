//! Staged grants through the whole service (docs/design.md#staged-writes-and-owners): a
//! read-only call whose layer the runner cannot mount read-only (Podman's `:O`) is bounded and
//! recorded as a writing call is.

use std::path::{Path, PathBuf};

use brokerd::server::Clients;
use proto::broker::Body;
use serde_json::json;

use crate::podman_fake::Case;
use crate::service::{kind, me, message, Client, Opts, Service};

/// The only layer directory (`d-<hash>`) of `session`, under the service's home.
fn layer_dir(svc: &Service, session: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(svc.home.join("staged").join(session))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(dirs.len(), 1, "{session}'s layers: {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// An owner's commit of the whole session: what landed, and the conflicts' paths.
fn commit(c: &mut Client, session: &str) -> (Vec<String>, Vec<String>) {
    match c
        .req(json!({"op": "commit", "id": "commit", "session": session}))
        .body
    {
        Body::Committed {
            committed,
            conflicts,
            ..
        } => (committed, conflicts.into_iter().map(|c| c.path).collect()),
        other => panic!("commit: {other:?}"),
    }
}

fn read(c: &mut Client, session: &str, call: &str, path: &Path) -> proto::broker::Answer {
    c.call(
        session,
        call,
        "staged",
        "read_file",
        json!({"path": path.display().to_string()}),
    )
}

/// The staged bytes of the session raised to the bound of `max_staged_bytes = 64`, as if an
/// earlier call had written them.
fn fill_to_the_bound(svc: &Service, session: &str) {
    let upper = layer_dir(svc, session).join("upper");
    std::fs::write(upper.join("big"), [b'x'; 64]).unwrap();
}

/// Podman through the whole service, its `podman` a fake that writes into the overlay volume's
/// upper directory as a container would: a read-only call of a session with a layer is
/// mounted `:O` (Podman takes no `ro` with it), and what it writes there is held to
/// `max_staged_bytes` before it runs and recorded for conflicts after it, as a write is.
#[test]
fn a_read_only_podman_call_is_bounded_and_recorded_as_a_write() {
    // What each container does, by its call: `write` adds a file, `read` changes one, as an
    // overlay copies it up.
    let case = Case::new(
        "pstaged",
        r#"cat > "$d/stdin.$$"
call="${name#boxmaker-*-}"; call="${call%-*}"
upper=""
for a in "$@"; do
  case "$a" in
    --volume=*:O,upperdir=*) upper="${a#*:O,upperdir=}"; upper="${upper%,workdir=*}" ;;
  esac
done
printf '%s %s\n' "$call" "$upper" >> "$d/uppers"
case "$call" in
  write) echo new > "$upper/new.txt" ;;
  read) echo scribbled > "$upper/SCRIBBLE.txt" ;;
esac
echo ran
"#,
    );
    let svc = Service::with(Opts {
        owners: Some(Clients::of_uids([me()])),
        broker_extra: "max_staged_bytes = 64",
        podman: Some(crate::podman_fake::fake_podman().to_path_buf()),
        ..Opts::default()
    });
    let mut c = svc.connect();
    let scribble = svc.staged.join("SCRIBBLE.txt");
    std::fs::write(&scribble, "real\n").unwrap();
    let s = case.session;

    let a = c.call(
        s,
        "write",
        "staged",
        "write_file",
        json!({"path": svc.staged.join("new.txt").display().to_string(), "content": "new\n"}),
    );
    assert_eq!(kind(&a), "result", "{a:?}");
    let upper = layer_dir(&svc, s).join("upper");
    let a = read(&mut c, s, "read", &scribble);
    assert_eq!(kind(&a), "result", "{a:?}");
    let uppers = String::from_utf8_lossy(&case.record("uppers")).into_owned();
    assert_eq!(
        uppers,
        format!("write {0}\nread {0}\n", upper.display()),
        "both calls mount the layer"
    );
    assert_eq!(
        std::fs::read_to_string(&scribble).unwrap(),
        "real\n",
        "the real file is as it was"
    );

    // The host edits the file the read-only call changed in the layer: a conflict.
    std::fs::write(&scribble, "the owner's edit\n").unwrap();
    // At the bound, a read-only call is refused before podman runs, naming the limit.
    fill_to_the_bound(&svc, s);
    let a = read(&mut c, s, "more", &scribble);
    assert_eq!(kind(&a), "refused", "{a:?}");
    let why = message(&a);
    assert!(
        why.contains("max_staged_bytes") && why.contains("read-only"),
        "{why}"
    );
    assert!(
        !case
            .calls()
            .iter()
            .any(|l| l.contains("boxmaker-pstaged-more-")),
        "podman ran past the bound: {:?}",
        case.calls()
    );

    let (committed, conflicts) = commit(&mut c, s);
    assert_eq!(
        conflicts,
        [scribble.display().to_string()],
        "committed {committed:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&scribble).unwrap(),
        "the owner's edit\n",
        "the commit overwrote the host's newer file"
    );
    assert!(committed.contains(&svc.staged.join("new.txt").display().to_string()));
}

/// The same session at the bound on a runner that mounts a read-only call's layer read-only
/// (bwrap): its reads still run, and write nothing.
#[test]
fn a_read_only_call_on_a_read_only_layer_is_not_bounded() {
    for can_write in [false, true] {
        let svc = Service::with(Opts {
            owners: Some(Clients::of_uids([me()])),
            broker_extra: "max_staged_bytes = 64",
            read_only_layers_write: can_write,
            ..Opts::default()
        });
        let mut c = svc.connect();
        let stage = svc.staged.join("STAGE.txt").display().to_string();
        let a = c.call(
            "s1",
            "c1",
            "staged",
            "write_file",
            json!({"path": stage, "content": "x"}),
        );
        assert_eq!(kind(&a), "result", "{a:?}");
        let scribble = svc.staged.join("SCRIBBLE.txt");
        std::fs::write(&scribble, "real\n").unwrap();
        let upper = layer_dir(&svc, "s1").join("upper");
        let a = read(&mut c, "s1", "c2", &scribble);
        assert_eq!(kind(&a), "result", "{can_write}: {a:?}");
        assert_eq!(upper.join("SCRIBBLE.txt").exists(), can_write);
        fill_to_the_bound(&svc, "s1");
        let a = read(&mut c, "s1", "c3", &scribble);
        let want = if can_write { "refused" } else { "result" };
        assert_eq!(kind(&a), want, "{can_write}: {a:?}");
    }
}
