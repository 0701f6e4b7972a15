//! The label of every container brokerd starts on Podman (docs/design.md#the-podman-runner):
//! `boxmaker=tool` or `boxmaker=egress`, by which brokerd's sweep, `brokerd ps` and the
//! end-to-end suite find them. The key is written here once.

macro_rules! label_key {
    () => {
        "boxmaker"
    };
}

/// `podman ps --filter` for every container brokerd started.
pub const LABEL_FILTER: &str = concat!("label=", label_key!());
/// `podman ps --format` for the label's value of a container: `tool` or `egress`.
pub const LABEL_VALUE: &str = concat!("{{.Labels.", label_key!(), "}}");
/// `podman run`'s label of a tool's container.
pub const TOOL_LABEL: &str = concat!("--label=", label_key!(), "=tool");
/// `podman run`'s label of an egress proxy's container.
pub const EGRESS_LABEL: &str = concat!("--label=", label_key!(), "=egress");
