//! Option parsing as getopt_long does it, driven by a program's spec (`specs`).
//!
//! Short options cluster (`-rf`), a short option's value is attached or the next word, an
//! optional value is attached only; long options take `=VALUE` or the next word and may be
//! abbreviated to an unambiguous prefix; `--` ends the options; operands and options may mix
//! (GNU permutes) unless the spec stops at the first operand (a wrapper's command).

use super::specs::{Effect, Operands, Opt, Spec, Takes};
use super::*;

/// A spec that knows no options: every option is a harmless flag (for subcommands whose
/// options are read by name, such as git's).
pub(super) static LENIENT: Spec = Spec {
    operands: Operands::Own,
    stop_at_operand: false,
    abbreviate: false,
    unknown_harmless: true,
    bundled_first: false,
    options: Vec::new(),
    runs: None,
};

/// One option as given.
#[derive(Debug, Clone)]
pub(super) struct Given<'s> {
    /// The option, when the spec knows it.
    pub(super) opt: Option<&'s Opt>,
    /// As written (`-o`, `--outp`), for messages.
    pub(super) spelled: String,
    pub(super) value: Option<Arg>,
}

impl Given<'_> {
    pub(super) fn effect(&self) -> Effect {
        self.opt.map(|o| o.effect).unwrap_or(Effect::Plain)
    }

    /// Whether it is the option named `name` (a long name, or a short one as one character).
    pub(super) fn is(&self, name: &str) -> bool {
        match self.opt {
            Some(o) => {
                o.long.contains(&name)
                    || (name.chars().count() == 1 && name.chars().all(|c| o.short.contains(&c)))
            }
            None => self.spelled == format!("-{name}") || self.spelled == format!("--{name}"),
        }
    }
}

/// The arguments of one program, split.
#[derive(Debug, Default)]
pub(super) struct Parsed<'s> {
    pub(super) given: Vec<Given<'s>>,
    pub(super) operands: Vec<Arg>,
    /// What the classifier could not read: unknown or ambiguous options, missing values.
    pub(super) problems: Vec<String>,
}

impl<'s> Parsed<'s> {
    /// Whether the option named `name` (a long name, or a short one as one character) is given.
    pub(super) fn has(&self, name: &str) -> bool {
        self.given.iter().any(|g| g.is(name))
    }

    /// Whether any of these options is given.
    pub(super) fn has_any(&self, names: &[&str]) -> bool {
        names.iter().any(|n| self.has(n))
    }

    /// The values given to the option named `name`.
    pub(super) fn values(&self, name: &str) -> Vec<&Arg> {
        self.given
            .iter()
            .filter(|g| g.is(name))
            .filter_map(|g| g.value.as_ref())
            .collect()
    }

    pub(super) fn with_effect(&self, effect: Effect) -> impl Iterator<Item = &Given<'s>> {
        self.given.iter().filter(move |g| g.effect() == effect)
    }

    pub(super) fn operand_texts(&self) -> Vec<&str> {
        self.operands.iter().filter_map(|a| a.text()).collect()
    }
}

/// How a long option name resolves.
enum Long<'s> {
    Found(&'s Opt),
    Ambiguous(Vec<String>),
    Unknown,
}

fn find_long<'s>(spec: &'s Spec, name: &str) -> Long<'s> {
    if name.is_empty() {
        return Long::Unknown;
    }
    if let Some(o) = spec.options.iter().find(|o| o.long.contains(&name)) {
        return Long::Found(o);
    }
    if !spec.abbreviate {
        return Long::Unknown;
    }
    let candidates: Vec<&Opt> = spec
        .options
        .iter()
        .filter(|o| o.long.iter().any(|l| l.starts_with(name)))
        .collect();
    match candidates.as_slice() {
        [] => Long::Unknown,
        [one] => Long::Found(one),
        many => Long::Ambiguous(
            many.iter()
                .flat_map(|o| o.long.iter().filter(|l| l.starts_with(name)))
                .map(|l| format!("--{l}"))
                .collect(),
        ),
    }
}

/// Characters of a symbolic or octal mode (`chmod -w`, `chmod -x,u+r`), which look like options.
fn is_mode(word: &str) -> bool {
    word.len() > 1 && word.chars().all(|c| "rwxXstugoa=+-,01234567".contains(c))
}

/// Splits `args` by `spec`. For a spec that stops at its first operand, `operands` is the
/// command and its arguments, untouched.
pub(super) fn parse<'s>(program: &str, spec: &'s Spec, args: &[Arg]) -> Parsed<'s> {
    let unbundled;
    let args = match spec.bundled_first.then(|| unbundle(spec, args)).flatten() {
        Some(words) => {
            unbundled = words;
            &unbundled[..]
        }
        None => args,
    };
    let mut p = Parsed::default();
    let mut i = 0;
    let mut only_operands = false;
    while let Some(a) = args.get(i) {
        i += 1;
        if !only_operands && a.text().is_none() && unreadable_option(spec, a, &mut p) {
            continue;
        }
        let t = match a.text() {
            Some(t) if !only_operands && t != "-" && t.starts_with('-') => t,
            _ => {
                if spec.stop_at_operand {
                    p.operands.extend_from_slice(&args[i - 1..]);
                    return p;
                }
                p.operands.push(a.clone());
                continue;
            }
        };
        if t == "--" {
            only_operands = true;
            if spec.stop_at_operand {
                p.operands.extend_from_slice(&args[i..]);
                return p;
            }
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            match find_long(spec, name) {
                Long::Found(opt) => {
                    let value = match (opt.takes, attached) {
                        (Takes::Nothing, Some(_)) => {
                            p.problems.push(format!(
                                "{program} {t}: the option takes no value, so {program} will not run"
                            ));
                            None
                        }
                        (Takes::Nothing, None) | (Takes::Attached, None) => None,
                        (_, Some(v)) => Some(attached_arg(a, v)),
                        (Takes::Value, None) => next_value(program, t, args, &mut i, &mut p),
                    };
                    p.given.push(Given {
                        opt: Some(opt),
                        spelled: t.to_string(),
                        value,
                    });
                }
                Long::Ambiguous(names) => p
                    .problems
                    .push(format!("{program} {t} is ambiguous ({})", names.join(", "))),
                Long::Unknown if spec.unknown_harmless => p.given.push(Given {
                    opt: None,
                    spelled: format!("--{name}"),
                    value: attached.map(|v| attached_arg(a, v)),
                }),
                Long::Unknown => p.problems.push(format!(
                    "{program} {t} is an option the classifier does not know"
                )),
            }
            continue;
        }
        let cluster: Vec<char> = t.chars().skip(1).collect();
        for (k, c) in cluster.iter().enumerate() {
            let Some(opt) = spec.options.iter().find(|o| o.short.contains(c)) else {
                if spec.operands == Operands::Changed && is_mode(t) && p.operands.is_empty() {
                    p.operands.push(a.clone());
                } else if spec.unknown_harmless {
                    p.given.push(Given {
                        opt: None,
                        spelled: format!("-{c}"),
                        value: None,
                    });
                    continue;
                } else {
                    p.problems.push(format!(
                        "{program} -{c} is an option the classifier does not know"
                    ));
                }
                break;
            };
            let rest: String = cluster[k + 1..].iter().collect();
            let value = match opt.takes {
                Takes::Nothing => {
                    p.given.push(Given {
                        opt: Some(opt),
                        spelled: format!("-{c}"),
                        value: None,
                    });
                    continue;
                }
                Takes::Attached if rest.is_empty() => None,
                Takes::Attached => Some(attached_arg(a, &rest)),
                Takes::Value if !rest.is_empty() => Some(attached_arg(a, &rest)),
                Takes::Value => next_value(program, &format!("-{c}"), args, &mut i, &mut p),
            };
            p.given.push(Given {
                opt: Some(opt),
                spelled: format!("-{c}"),
                value,
            });
            break;
        }
    }
    p
}

/// An option word whose value the classifier cannot read (`--to-command="$X"`, `-I$(cat f)`):
/// the option as its literal start names it, given the rest of the word as its value, which
/// `Walk::expand` reads. Whether the word was taken as an option.
fn unreadable_option<'s>(spec: &'s Spec, a: &Arg, p: &mut Parsed<'s>) -> bool {
    let Some((Part::Text(head), rest)) = a.parts.as_ref().and_then(|ps| ps.split_first()) else {
        return false;
    };
    let value_of = |text: &str| Arg {
        lit: None,
        parts: Some(
            std::iter::once(Part::Text(text.to_string()))
                .chain(rest.iter().cloned())
                .collect(),
        ),
        ..a.clone()
    };
    let (opt, spelled, value) = if let Some(long) = head.strip_prefix("--") {
        let Some((name, v)) = long.split_once('=') else {
            return false;
        };
        match find_long(spec, name) {
            Long::Found(opt) => (opt, format!("--{name}"), value_of(v)),
            _ => return false,
        }
    } else if let Some(cluster) = head.strip_prefix('-') {
        // The flags before the option that takes the rest of the word.
        let mut flags = Vec::new();
        let mut chars = cluster.char_indices();
        let taking = loop {
            let Some((k, c)) = chars.next() else {
                return false;
            };
            let Some(opt) = spec.options.iter().find(|o| o.short.contains(&c)) else {
                return false;
            };
            if opt.takes != Takes::Nothing {
                break (opt, format!("-{c}"), value_of(&cluster[k + c.len_utf8()..]));
            }
            flags.push(Given {
                opt: Some(opt),
                spelled: format!("-{c}"),
                value: None,
            });
        };
        p.given.extend(flags);
        taking
    } else {
        return false;
    };
    p.given.push(Given {
        opt: Some(opt),
        spelled,
        value: Some(value),
    });
    true
}

/// `tar xfC a.tar dir` as `tar -x -f a.tar -C dir`: a first word of short options without a
/// dash, whose values are the words after it, in order. `None` when the first word is not
/// such a bundle.
fn unbundle(spec: &Spec, args: &[Arg]) -> Option<Vec<Arg>> {
    let (first, rest) = args.split_first()?;
    let bundle = first
        .text()
        .filter(|t| !t.is_empty() && !t.starts_with('-'))?;
    let opts: Vec<&Opt> = bundle
        .chars()
        .map(|c| spec.options.iter().find(|o| o.short.contains(&c)))
        .collect::<Option<_>>()?;
    let mut out = Vec::new();
    let mut values = rest.iter();
    for (c, opt) in bundle.chars().zip(opts) {
        out.push(first.with_text(&format!("-{c}")));
        if opt.takes == Takes::Value {
            out.extend(values.next().cloned());
        }
    }
    out.extend(values.cloned());
    Some(out)
}

/// The word after an option that takes one (`-o FILE`, `--output FILE`), whatever it looks like.
fn next_value(
    program: &str,
    option: &str,
    args: &[Arg],
    i: &mut usize,
    p: &mut Parsed,
) -> Option<Arg> {
    let value = args.get(*i).cloned();
    *i += 1;
    if value.is_none() {
        p.problems
            .push(format!("{program} {option} is missing its value"));
    }
    value
}

/// The value attached to an option word (`-oFILE`, `--output=FILE`).
fn attached_arg(word: &Arg, value: &str) -> Arg {
    word.with_text(value)
}

#[cfg(test)]
mod tests {
    use super::super::specs::spec_of;
    use super::*;

    fn args(words: &[&str]) -> Vec<Arg> {
        words.iter().map(|w| Arg::literal(w)).collect()
    }

    /// (program, arguments, options given as `name=value`, operands, problems?)
    type Case = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static [&'static str],
        bool,
    );

    #[test]
    fn getopt_long_rules() {
        let cases: &[Case] = &[
            ("sort", &["-o", "x", "d"], &["output=x"], &["d"], false),
            ("sort", &["-ox", "d"], &["output=x"], &["d"], false),
            (
                "sort",
                &["-uo", "x", "d"],
                &["unique", "output=x"],
                &["d"],
                false,
            ),
            ("sort", &["--outp=x", "d"], &["output=x"], &["d"], false),
            ("sort", &["--outp", "x", "d"], &["output=x"], &["d"], false),
            (
                "sort",
                &["d", "--output", "x"],
                &["output=x"],
                &["d"],
                false,
            ),
            (
                "sort",
                &["--compress-prog=P"],
                &["compress-program=P"],
                &[],
                false,
            ),
            ("sort", &["--", "-o", "x"], &[], &["-o", "x"], false),
            ("sort", &["--r"], &[], &[], true),
            ("sort", &["--frobnicate"], &[], &[], true),
            ("sort", &["-Q"], &[], &[], true),
            (
                "sed",
                &["--in", "s/a/b/", "f"],
                &["in-place"],
                &["s/a/b/", "f"],
                false,
            ),
            (
                "sed",
                &["-i.bak", "s/a/b/", "f"],
                &["in-place=.bak"],
                &["s/a/b/", "f"],
                false,
            ),
            (
                "sed",
                &["-ni", "p", "f"],
                &["quiet", "in-place"],
                &["p", "f"],
                false,
            ),
            (
                "xargs",
                &["-e", "sh", "cat"],
                &["eof"],
                &["sh", "cat"],
                false,
            ),
            (
                "xargs",
                &["-I", "{}", "rm", "{}"],
                &["I={}"],
                &["rm", "{}"],
                false,
            ),
            ("xargs", &["-n1", "rm"], &["max-args=1"], &["rm"], false),
            (
                "env",
                &["--", "rm", "-rf", "/"],
                &[],
                &["rm", "-rf", "/"],
                false,
            ),
            (
                "env",
                &["-u", "X", "ls", "-l"],
                &["unset=X"],
                &["ls", "-l"],
                false,
            ),
            ("chmod", &["-w", "f"], &[], &["-w", "f"], false),
            (
                "chmod",
                &["-R", "-w", "d"],
                &["recursive"],
                &["-w", "d"],
                false,
            ),
            (
                "rm",
                &["-rf", "--", "-x"],
                &["recursive", "force"],
                &["-x"],
                false,
            ),
        ];
        for (program, words, want_given, want_operands, want_problems) in cases {
            let spec = spec_of(program).expect("spec");
            let p = parse(program, spec, &args(words));
            let given: Vec<String> = p
                .given
                .iter()
                .map(|g| {
                    let name = g.opt.map(|o| o.name()).unwrap_or_default();
                    match &g.value {
                        Some(v) => format!("{name}={}", v.text().unwrap_or("?")),
                        None => name,
                    }
                })
                .collect();
            let mut want_sorted: Vec<String> = want_given.iter().map(|s| s.to_string()).collect();
            let mut given_sorted = given.clone();
            want_sorted.sort();
            given_sorted.sort();
            assert_eq!(given_sorted, want_sorted, "{program} {words:?}");
            assert_eq!(p.operand_texts(), *want_operands, "{program} {words:?}");
            assert_eq!(
                !p.problems.is_empty(),
                *want_problems,
                "{program} {words:?}: {:?}",
                p.problems
            );
        }
    }
}
