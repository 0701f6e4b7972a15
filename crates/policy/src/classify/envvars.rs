//! Environment variables whose value is a command another program runs: an editor, a pager,
//! an ssh command, a prompt the shell expands, and git config given through the environment
//! (`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, `GIT_CONFIG_PARAMETERS`). Setting one, in a
//! command's prefix, with `export` or through `env`, is read as the code it holds, as
//! `git -c core.editor=CMD` is (docs/design.md#modes-and-the-classifier).

use super::git::is_command_key;
use super::*;

/// Variables whose value a program runs as a command (most through a shell), or a shell
/// expands as a prompt (where `$(...)` runs).
const COMMAND_VARS: Names = Names(
    "EDITOR VISUAL FCEDIT PAGER MANPAGER SYSTEMD_PAGER BROWSER GIT_EDITOR GIT_SEQUENCE_EDITOR \
     GIT_PAGER GIT_SSH GIT_SSH_COMMAND GIT_EXTERNAL_DIFF GIT_ASKPASS GIT_PROXY_COMMAND \
     SSH_ASKPASS SUDO_ASKPASS RSYNC_RSH RSYNC_CONNECT_PROG CVS_RSH SVN_SSH HGEDITOR LESSOPEN \
     LESSCLOSE PROMPT_COMMAND PS1 PS2 PS4",
);

/// Whether the variable `name` holds a command another program runs: it is read as that
/// command, and is no more than it.
pub(super) fn is_command_var(name: &str) -> bool {
    COMMAND_VARS.contains(&name)
}

impl Walk<'_> {
    /// `name` set to `value`: when a program runs what the variable holds, the value is read as
    /// code (`GIT_EDITOR='rm -rf /' git commit` is dangerous).
    pub(super) fn command_variable(&mut self, name: &str, value: &Arg) {
        if COMMAND_VARS.contains(&name) {
            // less runs `|CMD` and `||CMD` of LESSOPEN.
            let code = match value.text() {
                Some(t) => value.with_text(t.trim_start_matches('|')),
                None => value.clone(),
            };
            self.held_code(&format!("the command {name} holds"), &[code]);
        } else if let Some(n) = name.strip_prefix("GIT_CONFIG_VALUE_") {
            // The key it goes with, as far as the command sets it: one it does not set, or
            // sets from text the classifier cannot read, may be any.
            let key = Arg {
                lit: None,
                parts: Some(vec![Part::Var(format!("GIT_CONFIG_KEY_{n}"))]),
                ..Arg::literal("")
            };
            let keys = self.expand(&key);
            let runs = keys.unknown
                || keys.outside
                || keys.texts.is_empty()
                || keys.texts.iter().any(|k| is_command_key(k));
            if runs {
                let code = match value.text() {
                    Some(t) => value.with_text(t.strip_prefix('!').unwrap_or(t)),
                    None => value.clone(),
                };
                self.run_code(&format!("the git config {name} holds"), &[code]);
            }
        } else if name == "GIT_CONFIG_PARAMETERS" {
            match value.text() {
                Some(t) => {
                    for setting in config_parameters(t) {
                        self.git_config_value(&Arg::literal(&setting));
                    }
                }
                None => self.run_code(
                    "the git config GIT_CONFIG_PARAMETERS holds",
                    std::slice::from_ref(value),
                ),
            }
        }
    }
}

/// The settings of `GIT_CONFIG_PARAMETERS` as `KEY=VALUE`: git writes each as `'KEY'='VALUE'`
/// (a quote inside as `'\''`), separated by spaces.
fn config_parameters(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '\\' if !quoted => current.extend(chars.next()),
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parameters_are_split_as_git_writes_them() {
        assert_eq!(
            config_parameters(r"'core.editor'='rm -rf /' 'user.name'='A '\''B'\'''"),
            ["core.editor=rm -rf /", "user.name=A 'B'"]
        );
        assert_eq!(config_parameters("core.pager=less"), ["core.pager=less"]);
        assert!(config_parameters("").is_empty());
    }
}
