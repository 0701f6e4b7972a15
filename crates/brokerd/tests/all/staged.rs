//! Staged grants through the whole service (docs/design.md#staged-writes-and-owners): a
//! read-only call whose layer the runner cannot mount read-only (Podman's `:O`) is bounded and
//! recorded as a writing call is, and `staged_ttl_s` removes the layers made before it.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use brokerd::server::Clients;
use proto::broker::Body;
use serde_json::{json, Value};

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

/// Seconds since the epoch.
fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `staged_ttl_s` counts from the layer's creation (`layer.json`'s `created`): a layer made
/// longer ago is removed whole by the expiry, audited as a discard naming what went and why;
/// a younger one is kept, and a change since does not make a layer younger.
#[test]
fn staged_ttl_removes_only_the_layers_older_than_it() {
    let svc = Service::with(Opts {
        broker_extra: "staged_ttl_s = 3600",
        ..Opts::default()
    });
    let mut c = svc.connect();
    let stage = svc.staged.join("STAGE.txt").display().to_string();
    for s in ["old", "young", "nearly"] {
        let a = c.call(
            s,
            "c1",
            "staged",
            "write_file",
            json!({"path": stage, "content": "x"}),
        );
        assert_eq!(kind(&a), "result", "{s}: {a:?}");
    }
    // Made 2 hours ago, and a little less than the TTL ago.
    for (s, age) in [("old", 7200), ("nearly", 3500)] {
        let meta = layer_dir(&svc, s).join("layer.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
        v["created"] = json!(now_s() - age);
        std::fs::write(&meta, serde_json::to_vec(&v).unwrap()).unwrap();
    }
    // A later change of the old session's layer does not make it younger.
    let a = c.call(
        "old",
        "c2",
        "staged",
        "write_file",
        json!({"path": svc.staged.join("SCRIBBLE.txt").display().to_string(), "content": "y"}),
    );
    assert_eq!(kind(&a), "result", "{a:?}");
    let records_before = svc.records().len();

    // The last call's answer can leave a moment before its hold of the layer is dropped, and
    // the expiry passes a held layer by (the next pass takes it): pass again until it goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        svc.expire_staged();
        if !svc.home.join("staged/old").exists() || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !svc.home.join("staged/old").exists(),
        "the old session's layer is gone"
    );
    for s in ["young", "nearly"] {
        layer_dir(&svc, s);
    }
    assert_eq!(
        std::fs::read_to_string(svc.staged.join("a.txt")).unwrap(),
        "a",
        "the expiry discards: the real directory is as it was"
    );
    let records = svc.records();
    let new: Vec<&Value> = records[records_before..].iter().collect();
    assert_eq!(new.len(), 1, "{new:?}");
    let r = new[0];
    assert_eq!(r["kind"], "staged");
    assert_eq!(r["session"], "old");
    assert_eq!(r["decision"], "discarded");
    assert_eq!(r["reason"], "past [broker] staged_ttl_s");
    let mut paths: Vec<(&str, &str)> = r["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["path"].as_str()?, p["change"].as_str()?)))
        .collect();
    paths.sort();
    let shown = |p: &str| svc.staged.join(p).display().to_string();
    let (scribble, a, new) = (shown("SCRIBBLE.txt"), shown("a.txt"), shown("new.txt"));
    assert_eq!(
        paths,
        [
            (scribble.as_str(), "added"),
            (a.as_str(), "deleted"),
            (new.as_str(), "added")
        ],
        "{r}"
    );
    // The session's changes are gone for `changes` too.
    match c
        .req(json!({"op": "changes", "id": "ch", "session": "old"}))
        .body
    {
        Body::Changes { changes, .. } => assert!(changes.is_empty(), "{changes:?}"),
        other => panic!("changes: {other:?}"),
    }
    // Once more removes nothing.
    svc.expire_staged();
    assert_eq!(svc.records().len(), records.len());
}

/// A staged layer Podman cannot mount (podman's own line, as Podman 4.3 printed it) is
/// `unavailable` and leaves the session unmarked: the sandbox is not known to be down, so the
/// session's next write is attempted, and runs, rather than refused.
#[test]
fn a_layer_podman_cannot_mount_does_not_mark_the_sandbox_missing() {
    let case = Case::new(
        "povl",
        r#"cat > "$d/stdin.$$"
call="${name#boxmaker-*-}"; call="${call%-*}"
for a in "$@"; do
  case "$a" in
    --volume=*:O,upperdir=*) dir="${a#--volume=}"; dir="${dir%%:*}"; upper="${a#*:O,upperdir=}"; upper="${upper%,workdir=*}" ;;
  esac
done
if [ "$call" = first ]; then
  printf 'Error: mounting overlay failed "%s": chmod %s: permission denied\n' "$dir" "$upper" >&2
  exit 126
fi
echo ran
"#,
    );
    let svc = Service::with(Opts {
        podman: Some(crate::podman_fake::fake_podman().to_path_buf()),
        ..Opts::default()
    });
    let mut c = svc.connect();
    let write = |c: &mut Client, call: &str| {
        c.call(
            case.session,
            call,
            "staged",
            "write_file",
            json!({"path": svc.staged.join("x.txt").display().to_string(), "content": "x"}),
        )
    };
    let a = write(&mut c, "first");
    assert_eq!(kind(&a), "unavailable", "{a:?}");
    let a = write(&mut c, "second");
    assert_eq!(kind(&a), "result", "{a:?}");
}
