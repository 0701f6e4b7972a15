//! Shell patterns in write targets (docs/design.md#grants-and-paths): what `tee gen*/x`
//! or `cp a gen.r?` may write, found the way the shell will find it, inside the grant.
//!
//! Matching follows POSIX pathname expansion (`*`, `?`, `[...]` with `!`/`^` and ranges,
//! backslash escapes) and bash's `{a,b}` alternatives; a leading dot is matched like any other
//! character, which finds more than the shell would, never less. Expansion lists only
//! directories inside the grant's directories, does not follow a symlink out of them, and stops
//! at `MAX_ENTRIES` entries: past that, the answer is "cannot tell".

use std::path::{Component, Path, PathBuf};

/// The most directory entries one expansion reads.
pub const MAX_ENTRIES: usize = 10_000;
/// The most alternatives `{a,b}` forms may make of one word.
const MAX_ALTERNATIVES: usize = 64;
/// Longer patterns are not matched (the answer is "cannot tell").
const MAX_PATTERN: usize = 4096;

/// Whether a word has characters the shell expands in a path.
pub fn is_pattern(word: &str) -> bool {
    word.contains(['*', '?', '[', '{'])
}

/// Whether a pattern has a character that must appear as it is (outside `*`, `?` and `[...]`).
pub fn has_literal(pattern: &str) -> bool {
    let mut in_class = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '*' | '?' if !in_class => {}
            '\\' if !in_class => return chars.next().is_some(),
            _ if !in_class => return true,
            _ => {}
        }
    }
    false
}

/// Whether `name` matches the shell pattern `pattern` (one path component, no braces).
/// `None` when the pattern is too long to match.
pub fn matches(pattern: &str, name: &str) -> Option<bool> {
    if pattern.len() > MAX_PATTERN || name.len() > MAX_PATTERN {
        return None;
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the last `*`: linear in practice.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => {
                pi += 1;
                ni += 1;
                continue;
            }
            Some('[') => {
                if let Some((hit, next)) = class(&p, pi, n[ni]) {
                    if hit {
                        pi = next;
                        ni += 1;
                        continue;
                    }
                } else if n[ni] == '[' {
                    // An unclosed `[` is an ordinary character.
                    pi += 1;
                    ni += 1;
                    continue;
                }
            }
            Some('\\') if p.get(pi + 1) == Some(&n[ni]) => {
                pi += 2;
                ni += 1;
                continue;
            }
            Some(c) if *c == n[ni] && *c != '\\' => {
                pi += 1;
                ni += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return Some(false),
        }
    }
    Some(p[pi..].iter().all(|c| *c == '*'))
}

/// A `[...]` class at `p[start]` against `c`: (whether it matches, index after it), or `None`
/// when the bracket does not close.
fn class(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let ch = *p.get(i)?;
        if ch == ']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        // A POSIX class (`[[:alpha:]]`): bash matches it as the class of characters it names.
        if ch == '[' && p.get(i + 1) == Some(&':') {
            let name_end =
                (i + 2..p.len().saturating_sub(1)).find(|j| p[*j] == ':' && p[*j + 1] == ']')?;
            let name: String = p[i + 2..name_end].iter().collect();
            hit |= posix_class(&name, c);
            i = name_end + 2;
            continue;
        }
        let lo = if ch == '\\' {
            i += 1;
            *p.get(i)?
        } else {
            ch
        };
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|e| *e != ']') {
            let hi = p[i + 2];
            hit |= lo <= c && c <= hi;
            i += 3;
        } else {
            hit |= lo == c;
            i += 1;
        }
    }
}

/// Whether `c` is in the POSIX character class `name` (ASCII, as in the C locale); an
/// unknown name matches nothing, as in bash.
fn posix_class(name: &str, c: char) -> bool {
    match name {
        "alnum" => c.is_ascii_alphanumeric(),
        "alpha" => c.is_ascii_alphabetic(),
        "blank" => c == ' ' || c == '\t',
        "cntrl" => c.is_ascii_control(),
        "digit" => c.is_ascii_digit(),
        "graph" => c.is_ascii_graphic(),
        "lower" => c.is_ascii_lowercase(),
        "print" => c.is_ascii_graphic() || c == ' ',
        "punct" => c.is_ascii_punctuation(),
        "space" => c.is_ascii_whitespace() || c == '\u{b}',
        "upper" => c.is_ascii_uppercase(),
        "xdigit" => c.is_ascii_hexdigit(),
        _ => false,
    }
}

/// The words bash makes of `word` by `{a,b}` expansion (the word itself when it has none);
/// `None` past `MAX_ALTERNATIVES` or for a word longer than `MAX_PATTERN`.
pub fn alternatives(word: &str) -> Option<Vec<String>> {
    if word.len() > MAX_PATTERN {
        return None;
    }
    let mut out = Vec::new();
    expand_braces(word, &mut out, 0)?;
    Some(out)
}

fn expand_braces(word: &str, out: &mut Vec<String>, depth: usize) -> Option<()> {
    if depth > 8 || out.len() > MAX_ALTERNATIVES {
        return None;
    }
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    for (k, &(open, c)) in chars.iter().enumerate() {
        if c != '{' || (k > 0 && chars[k - 1].1 == '\\') {
            continue;
        }
        // The matching `}` and the top-level commas between.
        let mut level = 0;
        let mut commas = Vec::new();
        let mut close = None;
        for &(i, ch) in &chars[k + 1..] {
            match ch {
                '{' => level += 1,
                '}' if level == 0 => {
                    close = Some(i);
                    break;
                }
                '}' => level -= 1,
                ',' if level == 0 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        if commas.is_empty() {
            continue;
        }
        let (head, tail) = (&word[..open], &word[close + 1..]);
        let mut start = open + 1;
        for end in commas.into_iter().chain([close]) {
            let alt = format!("{head}{}{tail}", &word[start..end]);
            expand_braces(&alt, out, depth + 1)?;
            start = end + 1;
        }
        return Some(());
    }
    if out.len() >= MAX_ALTERNATIVES {
        return None;
    }
    out.push(word.to_string());
    Some(())
}

/// The paths an absolute pattern matches inside `roots` (the grant's directories, resolved).
/// `None` when the expansion cannot be told within the bounds.
pub fn expand(pattern: &Path, roots: &[PathBuf]) -> Option<Vec<PathBuf>> {
    expand_in(&crate::view::Host, pattern, roots)
}

/// `expand` on `view`'s tree (a session's merged view).
pub fn expand_in(
    view: &dyn crate::view::View,
    pattern: &Path,
    roots: &[PathBuf],
) -> Option<Vec<PathBuf>> {
    let mut found = vec![PathBuf::from("/")];
    let mut read = 0;
    let components: Vec<Component> = pattern.components().collect();
    if components.first() != Some(&Component::RootDir) {
        return None;
    }
    for comp in &components[1..] {
        let part = comp.as_os_str().to_str()?;
        let mut next = Vec::new();
        for dir in &found {
            if !is_pattern(part) {
                next.push(dir.join(part));
                continue;
            }
            // Only directories the grant holds are listed; elsewhere the sandbox holds nothing
            // of the owner's.
            let Ok(real) = crate::workspace::follow(view, dir, roots) else {
                continue;
            };
            if !roots.iter().any(|r| real.starts_with(r)) {
                continue;
            }
            let Ok(entries) = view.read_dir(&real) else {
                continue;
            };
            for name in entries {
                read += 1;
                if read > MAX_ENTRIES {
                    return None;
                }
                let Some(name) = name.to_str() else { continue };
                if matches(part, name)? {
                    next.push(dir.join(name));
                }
            }
        }
        found = next;
        if found.len() > MAX_ENTRIES {
            return None;
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn matching() {
        let cases = [
            ("generat*", "generated", true),
            ("[[:lower:]]endor", "vendor", true),
            ("[[:upper:]]endor", "vendor", false),
            ("[![:digit:]]endor", "vendor", true),
            ("x[[:punct:]]y", "x_y", true),
            ("[[:alpha:][:digit:]]1", "a1", true),
            ("[[:nope:]]x", "ax", false),
            ("vendo?", "vendor", true),
            ("vendo?", "vendors", false),
            ("gen.r?", "gen.rs", true),
            ("*", ".hidden", true),
            ("*.c", "x.c", true),
            ("*.c", "x.h", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("[gv]enerated", "generated", true),
            ("[!g]enerated", "generated", false),
            ("[^g]enerated", "xenerated", true),
            ("[a-h]en*", "generated", true),
            ("[]]x", "]x", true),
            ("[x", "[x", true),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("no_dir", "no_dir", true),
            ("n*_m*s", "node_modules", true),
            ("third?party", "third_party", true),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(matches(pattern, name), Some(want), "{pattern} {name}");
        }
        let long = "*".repeat(MAX_PATTERN + 1);
        assert_eq!(matches(&long, "x"), None);
        // Many stars against a long name stay fast.
        let stars = "*a".repeat(1000);
        assert_eq!(matches(&stars, &"b".repeat(4000)), Some(false));
    }

    #[test]
    fn braces() {
        assert_eq!(
            alternatives("gen{e,}rated/x").unwrap(),
            vec!["generated/x", "genrated/x"]
        );
        assert_eq!(
            alternatives("{a,b{c,d}}e").unwrap(),
            vec!["ae", "bce", "bde"]
        );
        assert_eq!(alternatives("a{b}c").unwrap(), vec!["a{b}c"]);
        assert_eq!(alternatives("x").unwrap(), vec!["x"]);
        assert!(alternatives(&"{a,b}".repeat(10)).is_none());
    }

    #[test]
    fn expansion_stays_in_the_grant() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = fs::canonicalize(dir.path()).expect("canonical").join("g");
        let outside = fs::canonicalize(dir.path()).expect("canonical").join("o");
        fs::create_dir_all(root.join("generated")).expect("mkdir");
        fs::create_dir_all(root.join("src")).expect("mkdir");
        fs::create_dir_all(outside.join("generated")).expect("mkdir");
        fs::write(root.join("gen.rs"), "x").expect("write");
        std::os::unix::fs::symlink(&outside, root.join("out")).expect("symlink");
        let roots = vec![root.clone()];
        let got = |p: &str| {
            let mut v = expand(&root.join(p), &roots).expect("decided");
            v.sort();
            v
        };
        assert_eq!(got("generat*/x.c"), vec![root.join("generated/x.c")]);
        assert_eq!(got("gen.r?"), vec![root.join("gen.rs")]);
        assert_eq!(got("nothing*"), Vec::<PathBuf>::new());
        // Through the symlink the listing would leave the grant: nothing is listed there.
        assert_eq!(got("out/gen*"), Vec::<PathBuf>::new());
        assert_eq!(
            expand(&outside.join("gen*"), &roots).expect("decided"),
            Vec::<PathBuf>::new()
        );
        assert_eq!(expand(Path::new("relative/*"), &roots), None);
    }

    #[test]
    fn expansion_is_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = fs::canonicalize(dir.path()).expect("canonical");
        for i in 0..50 {
            fs::create_dir_all(root.join(format!("d{i}"))).expect("mkdir");
        }
        let roots = vec![root.clone()];
        // 50 directories, each listed for the second component: within the bound.
        assert!(expand(&root.join("*/*"), &roots).is_some());
        for i in 0..(MAX_ENTRIES / 50 + 1) {
            fs::write(root.join("d0").join(format!("f{i}")), "").expect("write");
        }
        for i in 1..50 {
            for j in 0..(MAX_ENTRIES / 50 + 1) {
                fs::write(root.join(format!("d{i}")).join(format!("f{j}")), "").expect("write");
            }
        }
        assert_eq!(expand(&root.join("*/*"), &roots), None);
    }
}
