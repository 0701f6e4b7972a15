//! The argument structs of the four tools (docs/design.md#the-toolkit).
//!
//! Parsing is strict: an unknown field is an error, so a model cannot smuggle an option that
//! one side understands and the other ignores. `cwd` is omitted from the JSON when `None`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most standard input a tool reads (docs/design.md#the-toolkit): brokerd refuses a call whose
/// tool JSON is larger before anything runs, and toolkit refuses to read more.
pub const MAX_INPUT: usize = 2 * 1024 * 1024;

/// Where shell runs when the call names no `cwd` (docs/design.md#the-toolkit): toolkit runs there,
/// and brokerd resolves the workspace of such a call from it.
pub const DEFAULT_CWD: &str = "/tmp";

/// `HOME` and `TMPDIR` of every program a tool starts, on both backends: toolkit sets them
/// for what it runs (Podman's argument list sets no environment), bwrap's argument list for
/// toolkit itself; the start-up preflight checks them (docs/design.md#preflight-and-poisoning).
pub const TOOL_HOME: &str = "/tmp";

/// `XDG_CACHE_HOME` of every program a tool starts, under which toolkit points the common
/// tool caches too; a grant with `cache = true` has its own cache directory mounted here
/// (docs/design.md#grant-caches).
pub const TOOL_CACHE: &str = "/tmp/.cache";

/// The toolkit inside every sandbox: each tool and the egress proxy are this program
/// (docs/design.md#the-toolkit).
pub const TOOLKIT: &str = "/bin/toolkit";

/// `toolkit version` prints [`TOOLKIT_VERSION`] and a newline: brokerd's check of a toolset
/// asks it, so that a toolset runs only a toolkit built from the same sources as brokerd
/// (docs/design.md#toolsets).
pub const VERSION_SUBCOMMAND: &str = "version";

/// The version toolkit and brokerd share (the workspace's).
pub const TOOLKIT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the per-call egress directory appears inside the sandbox
/// (docs/design.md#http_fetch-and-its-egress-proxy).
pub const EGRESS_DIR: &str = "/run/egress";
/// The egress proxy's socket, in [`EGRESS_DIR`].
pub const EGRESS_SOCKET_NAME: &str = "egress.sock";
/// [`EGRESS_DIR`]`/`[`EGRESS_SOCKET_NAME`]: what the proxy listens on and curl dials.
pub const EGRESS_SOCKET: &str = "/run/egress/egress.sock";

/// The name of a tool as the model and the protocol spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    ReadFile,
    WriteFile,
    Shell,
    HttpFetch,
}

impl ToolName {
    pub const ALL: [ToolName; 4] = [
        ToolName::ReadFile,
        ToolName::WriteFile,
        ToolName::Shell,
        ToolName::HttpFetch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::WriteFile => "write_file",
            ToolName::Shell => "shell",
            ToolName::HttpFetch => "http_fetch",
        }
    }

    /// The tool for a name, or `None` for anything else (exact spelling, no case folding).
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ToolName {
    /// What the model is told the tool does.
    pub fn description(self) -> &'static str {
        match self {
            ToolName::ReadFile => "Read a UTF-8 text file of at most 1 MiB from the granted directories.",
            ToolName::WriteFile => "Create or replace a text file in a writable granted directory.",
            ToolName::Shell => "Run a shell command in a sandbox that sees only the granted directories and has no network. Output is standard output and standard error together, then the exit status.",
            ToolName::HttpFetch => "Fetch an https URL from one of the granted hosts. Returns the body, then the HTTP status.",
        }
    }

    /// The JSON Schema of the tool's arguments, generated from its struct so that what the
    /// model is offered is what brokerd and toolkit parse.
    pub fn parameters(self) -> serde_json::Value {
        let schema = match self {
            ToolName::ReadFile => schemars::schema_for!(ReadFileArgs),
            ToolName::WriteFile => schemars::schema_for!(WriteFileArgs),
            ToolName::Shell => schemars::schema_for!(ShellArgs),
            ToolName::HttpFetch => schemars::schema_for!(HttpFetchArgs),
        };
        let mut value = schema.to_value();
        if let Some(obj) = value.as_object_mut() {
            // Model APIs want the bare object schema.
            obj.remove("$schema");
            obj.remove("title");
        }
        value
    }
}

/// Why a tool's arguments were not accepted.
#[derive(Debug)]
pub enum ArgsError {
    /// The text is a JSON value but not an object (serde would read an array as a struct).
    NotAnObject,
    /// Not JSON, a missing or unknown field, or a field of the wrong type.
    Json(serde_json::Error),
}

impl std::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgsError::NotAnObject => f.write_str("the arguments must be a JSON object"),
            ArgsError::Json(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ArgsError {}

/// Parses a tool's arguments strictly: a JSON object with exactly the struct's fields.
/// Both brokerd and toolkit parse through here, so they accept exactly the same texts.
pub fn parse_args<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ArgsError> {
    if !text.trim_start().starts_with('{') {
        // Tell "not JSON at all" from "JSON but not an object".
        return match serde_json::from_str::<serde_json::Value>(text) {
            Ok(_) => Err(ArgsError::NotAnObject),
            Err(e) => Err(ArgsError::Json(e)),
        };
    }
    serde_json::from_str(text).map_err(ArgsError::Json)
}

/// `read_file { path }`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file to read: absolute, or relative to the grant's first directory.
    pub path: String,
}

/// `write_file { path, content }`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file to create or replace: absolute, or relative to the grant's first directory.
    /// Its directory must exist.
    pub path: String,
    /// The whole new content of the file, as text.
    pub content: String,
}

/// `shell { command, cwd? }`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// A command line for /bin/sh (busybox): no network, only the grant's directories.
    pub command: String,
    /// The directory to run in; /tmp when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `http_fetch { url }`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpFetchArgs {
    /// An https URL on one of the grant's hosts.
    pub url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_egress_socket_is_in_the_egress_directory() {
        assert_eq!(
            EGRESS_SOCKET,
            format!("{EGRESS_DIR}/{EGRESS_SOCKET_NAME}"),
            "one path, spelled two ways"
        );
    }
    use serde::de::DeserializeOwned;

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(v: T) -> String {
        let json = serde_json::to_string(&v).expect("serialize");
        let back: T = serde_json::from_str(&json).expect("parse back");
        assert_eq!(back, v);
        json
    }

    #[test]
    fn round_trips_and_wire_shape() {
        assert_eq!(
            round_trip(ReadFileArgs {
                path: "/srv/a".into()
            }),
            r#"{"path":"/srv/a"}"#
        );
        assert_eq!(
            round_trip(WriteFileArgs {
                path: "a".into(),
                content: "x\ny".into()
            }),
            r#"{"path":"a","content":"x\ny"}"#
        );
        assert_eq!(
            round_trip(ShellArgs {
                command: "ls".into(),
                cwd: None
            }),
            r#"{"command":"ls"}"#
        );
        assert_eq!(
            round_trip(ShellArgs {
                command: "ls".into(),
                cwd: Some("/srv".into())
            }),
            r#"{"command":"ls","cwd":"/srv"}"#
        );
        assert_eq!(
            round_trip(HttpFetchArgs {
                url: "https://a.example/".into()
            }),
            r#"{"url":"https://a.example/"}"#
        );
    }

    #[test]
    fn strict_parsing() {
        // (input, parses as ShellArgs)
        let cases = [
            (r#"{"command":"ls"}"#, true),
            (r#"{"command":"ls","cwd":null}"#, true),
            (r#"{"command":"ls","cwd":"/tmp"}"#, true),
            (r#"{"command":"ls","timeout":5}"#, false),
            (r#"{"cwd":"/tmp"}"#, false),
            (r#"{"command":5}"#, false),
            (r#"["ls"]"#, false),
            (r#""ls""#, false),
            (r#"{"command":"ls""#, false),
            ("", false),
        ];
        for (input, ok) in cases {
            assert_eq!(parse_args::<ShellArgs>(input).is_ok(), ok, "{input}");
        }
        assert!(parse_args::<ReadFileArgs>(r#"{"path":"a","mode":"r"}"#).is_err());
        assert!(parse_args::<WriteFileArgs>(r#"{"path":"a"}"#).is_err());
        assert!(parse_args::<HttpFetchArgs>(r#"{"url":"x","method":"POST"}"#).is_err());
        assert!(matches!(
            parse_args::<ReadFileArgs>(r#"["a"]"#),
            Err(ArgsError::NotAnObject)
        ));
        assert!(matches!(
            parse_args::<ReadFileArgs>("nope"),
            Err(ArgsError::Json(_))
        ));
        assert!(parse_args::<ReadFileArgs>(" \n{\"path\":\"a\"}").is_ok());
    }

    #[test]
    fn schemas_follow_the_structs() {
        for t in ToolName::ALL {
            let p = t.parameters();
            assert_eq!(p["type"], "object", "{t}");
            assert_eq!(
                p["additionalProperties"], false,
                "{t}: strict like the parser"
            );
            assert!(!t.description().is_empty());
        }
        let shell = ToolName::Shell.parameters();
        assert_eq!(shell["required"], serde_json::json!(["command"]));
        assert!(shell["properties"]["cwd"].is_object());
        let write = ToolName::WriteFile.parameters();
        assert_eq!(write["required"], serde_json::json!(["path", "content"]));
    }

    #[test]
    fn tool_names() {
        for t in ToolName::ALL {
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{t}\""));
        }
        assert_eq!(ToolName::parse("Shell"), None);
        assert_eq!(ToolName::parse("exec"), None);
    }
}
