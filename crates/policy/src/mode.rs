//! Modes and what each grants (docs/design.md#modes-and-the-classifier): one immutable
//! capability set per mode, asked for only through `Capabilities::for_mode`.

use std::fmt;

use proto::tools::ToolName;
use serde::{Deserialize, Serialize};

use crate::classify::CommandClass;

/// How much a grant lets the model do without the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Reading only; everything else is refused.
    Safe,
    /// Reading runs; writing, complex and dangerous work asks the owner first.
    Ask,
    /// Everything the grant allows runs; only dangerous commands ask.
    Auto,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Safe => "safe",
            Mode::Ask => "ask",
            Mode::Auto => "auto",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a call does, as far as the mode cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionClass {
    /// read_file, http_fetch, read-only shell commands.
    Read,
    /// write_file, workspace-mutating shell commands.
    Mutate,
    /// Shell commands the classifier cannot see through.
    Complex,
    /// Shell commands that destroy a root or the system.
    Dangerous,
}

impl ActionClass {
    /// The class of a tool that needs no command classification; `None` for `shell`.
    pub fn of_tool(tool: ToolName) -> Option<ActionClass> {
        match tool {
            ToolName::ReadFile | ToolName::HttpFetch => Some(ActionClass::Read),
            ToolName::WriteFile => Some(ActionClass::Mutate),
            ToolName::Shell => None,
        }
    }
}

impl From<CommandClass> for ActionClass {
    fn from(c: CommandClass) -> Self {
        match c {
            CommandClass::ReadOnly => ActionClass::Read,
            CommandClass::WorkspaceMutating => ActionClass::Mutate,
            CommandClass::ShellComplex => ActionClass::Complex,
            CommandClass::Dangerous => ActionClass::Dangerous,
        }
    }
}

/// The mode's answer for one class of action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Run it now.
    Run,
    /// Ask the owner with a single-use ticket first.
    Ask,
    /// Do not run it.
    Refuse,
}

/// What a mode grants: fixed, one per mode.
#[derive(Debug, PartialEq, Eq)]
pub struct Capabilities {
    mode: Mode,
    read: Grant,
    mutate: Grant,
    complex: Grant,
    dangerous: Grant,
}

static SAFE: Capabilities = Capabilities {
    mode: Mode::Safe,
    read: Grant::Run,
    mutate: Grant::Refuse,
    complex: Grant::Refuse,
    dangerous: Grant::Refuse,
};

static ASK: Capabilities = Capabilities {
    mode: Mode::Ask,
    read: Grant::Run,
    mutate: Grant::Ask,
    complex: Grant::Ask,
    dangerous: Grant::Ask,
};

static AUTO: Capabilities = Capabilities {
    mode: Mode::Auto,
    read: Grant::Run,
    mutate: Grant::Run,
    complex: Grant::Run,
    dangerous: Grant::Ask,
};

impl Capabilities {
    /// The only way to ask what a mode grants.
    pub fn for_mode(mode: Mode) -> &'static Capabilities {
        match mode {
            Mode::Safe => &SAFE,
            Mode::Ask => &ASK,
            Mode::Auto => &AUTO,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn grant(&self, action: ActionClass) -> Grant {
        match action {
            ActionClass::Read => self.read,
            ActionClass::Mutate => self.mutate,
            ActionClass::Complex => self.complex,
            ActionClass::Dangerous => self.dangerous,
        }
    }

    /// Whether the sandbox gets the grant's writable directories writable for this action.
    /// A read gets read-only mounts even in `auto`; `safe` never mounts anything writable.
    pub fn writable_mounts(&self, action: ActionClass) -> bool {
        self.grant(action) != Grant::Refuse && action != ActionClass::Read
    }
}

#[cfg(test)]
mod tests {
    use super::ActionClass::*;
    use super::Grant::*;
    use super::*;

    #[test]
    fn what_each_mode_grants() {
        // (mode, read, mutate, complex, dangerous)
        let table = [
            (Mode::Safe, Run, Refuse, Refuse, Refuse),
            (Mode::Ask, Run, Ask, Ask, Ask),
            (Mode::Auto, Run, Run, Run, Ask),
        ];
        for (mode, read, mutate, complex, dangerous) in table {
            let caps = Capabilities::for_mode(mode);
            assert_eq!(caps.mode(), mode);
            assert_eq!(caps.grant(Read), read, "{mode} read");
            assert_eq!(caps.grant(Mutate), mutate, "{mode} mutate");
            assert_eq!(caps.grant(Complex), complex, "{mode} complex");
            assert_eq!(caps.grant(Dangerous), dangerous, "{mode} dangerous");
        }
    }

    #[test]
    fn mounts() {
        // (mode, action, writable mounts)
        let table = [
            (Mode::Safe, Read, false),
            (Mode::Safe, Mutate, false),
            (Mode::Safe, Dangerous, false),
            (Mode::Ask, Read, false),
            (Mode::Ask, Mutate, true),
            (Mode::Auto, Read, false),
            (Mode::Auto, Mutate, true),
            (Mode::Auto, Complex, true),
        ];
        for (mode, action, writable) in table {
            assert_eq!(
                Capabilities::for_mode(mode).writable_mounts(action),
                writable,
                "{mode} {action:?}"
            );
        }
    }

    #[test]
    fn classes_of_tools_and_commands() {
        let tools = [
            (ToolName::ReadFile, Some(Read)),
            (ToolName::HttpFetch, Some(Read)),
            (ToolName::WriteFile, Some(Mutate)),
            (ToolName::Shell, None),
        ];
        for (tool, class) in tools {
            assert_eq!(ActionClass::of_tool(tool), class, "{tool}");
        }
        let commands = [
            (CommandClass::ReadOnly, Read),
            (CommandClass::WorkspaceMutating, Mutate),
            (CommandClass::ShellComplex, Complex),
            (CommandClass::Dangerous, Dangerous),
        ];
        for (c, a) in commands {
            assert_eq!(ActionClass::from(c), a);
        }
    }

    #[test]
    fn serde_spelling() {
        for (mode, text) in [
            (Mode::Safe, "safe"),
            (Mode::Ask, "ask"),
            (Mode::Auto, "auto"),
        ] {
            assert_eq!(
                serde_json::to_string(&mode).ok(),
                Some(format!("\"{text}\""))
            );
            let back: Result<Mode, _> = serde_json::from_str(&format!("\"{text}\""));
            assert_eq!(back.ok(), Some(mode));
            assert_eq!(mode.to_string(), text);
        }
        assert!(serde_json::from_str::<Mode>("\"Auto\"").is_err());
    }
}
