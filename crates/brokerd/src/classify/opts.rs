//! Option parsing for the programs whose options matter.

use super::*;
#[derive(Debug, Default)]
pub(super) struct Opts {
    /// Short flags as `-x` each, long flags as `--name`.
    pub(super) flags: Vec<String>,
    /// Options with a value: (`-o` or `--output`, value).
    pub(super) values: Vec<(String, String)>,
    pub(super) positionals: Vec<Arg>,
}

impl Opts {
    pub(super) fn has(&self, names: &[&str]) -> bool {
        self.flags.iter().any(|f| names.contains(&f.as_str()))
            || self.values.iter().any(|(k, _)| names.contains(&k.as_str()))
    }
    pub(super) fn value(&self, names: &[&str]) -> Vec<&str> {
        self.values
            .iter()
            .filter(|(k, _)| names.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
            .collect()
    }
    pub(super) fn positional_texts(&self) -> Vec<&str> {
        self.positionals.iter().filter_map(|a| a.text()).collect()
    }
}

/// Splits arguments GNU-style. `short_val` lists the short options that take a value,
/// `long_val` the long ones (`--name` without dashes). A non-literal argument is positional.
pub(super) fn parse_opts(args: &[Arg], short_val: &str, long_val: &[&str]) -> Opts {
    let mut o = Opts::default();
    let mut i = 0;
    let mut only_positional = false;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        let Some(t) = a.text() else {
            o.positionals.push(a.clone());
            continue;
        };
        if only_positional || t == "-" || !t.starts_with('-') {
            o.positionals.push(a.clone());
            continue;
        }
        if t == "--" {
            only_positional = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            if let Some((k, v)) = long.split_once('=') {
                o.values.push((format!("--{k}"), v.to_string()));
            } else if long_val.contains(&long) {
                let v = args.get(i).and_then(|a| a.text()).unwrap_or("").to_string();
                i += 1;
                o.values.push((t.to_string(), v));
            } else {
                o.flags.push(t.to_string());
            }
            continue;
        }
        let cluster: Vec<char> = t.chars().skip(1).collect();
        for (k, c) in cluster.iter().enumerate() {
            if short_val.contains(*c) {
                let rest: String = cluster[k + 1..].iter().collect();
                let v = if rest.is_empty() {
                    let v = args.get(i).and_then(|a| a.text()).unwrap_or("").to_string();
                    i += 1;
                    v
                } else {
                    rest
                };
                o.values.push((format!("-{c}"), v));
                break;
            }
            o.flags.push(format!("-{c}"));
        }
    }
    o
}

/// How many leading arguments are the wrapper's own options.
pub(super) fn skip_options(args: &[Arg], short_val: &str, long_val: &[&str]) -> usize {
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(|a| a.text()) {
        if t == "--" {
            return i + 1;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += 1;
        if let Some(long) = t.strip_prefix("--") {
            if !long.contains('=') && long_val.contains(&long) {
                i += 1;
            }
        } else if t.len() == 2 && t[1..].chars().all(|c| short_val.contains(c)) {
            i += 1;
        }
    }
    i
}
