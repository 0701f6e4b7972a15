//! The paths a command writes: where they land (after a `cd`, under a `chroot`), whether they
//! are devices, and whether one is a grant directory, holds one or empties one.

use super::*;

impl Walk<'_> {
    /// Where a path the command names lands: joined to the working directory the walk
    /// followed, then under the root a runner gave the command.
    pub(super) fn land(&self, t: &str) -> String {
        let joined = match &self.cwd {
            Some(dir) if !t.starts_with('/') && !t.starts_with('~') => {
                Path::new(dir).join(t).to_string_lossy().into_owned()
            }
            _ => t.to_string(),
        };
        match &self.reroot {
            Reroot::At(root) if joined.starts_with('/') => root
                .join(joined.trim_start_matches('/'))
                .to_string_lossy()
                .into_owned(),
            _ => joined,
        }
    }

    /// A path the command writes.
    pub(super) fn write_target(&mut self, a: &Arg) {
        self.wrote_other |= !self.in_link;
        let Some(t) = a.text() else {
            self.raise(
                CommandClass::ShellComplex,
                format!("a write to a path the classifier cannot read ({})", a.raw),
            );
            // It may be any path; the ones the command shows are reported too.
            self.unplaced = true;
            self.push_write(a.raw.clone());
            let values = self.expand(a);
            for v in values.texts {
                let shown = self.land(&v);
                self.push_write(shown);
            }
            return;
        };
        let shown = self.land(t);
        let relative = !shown.starts_with('/') && !shown.starts_with('~');
        self.unplaced |= a.found != Found::No
            || (relative && self.cwd_unknown)
            || (!relative && self.reroot == Reroot::Unknown);
        // `//dev/sda`, `/dev/../dev/sda` and `sda` after `cd /dev` are the disk too.
        let lexical = normalise(Path::new(&shown));
        let sink = lexical
            .to_str()
            .is_some_and(|l| HARMLESS_SINKS.contains(&l));
        if sink || lexical.starts_with("/dev/fd") {
            return;
        }
        if ["/dev", "/proc", "/sys"]
            .iter()
            .any(|k| lexical.starts_with(k))
        {
            self.raise(
                CommandClass::Dangerous,
                format!("a write to the device or kernel file {shown}"),
            );
        }
        self.raise(CommandClass::WorkspaceMutating, format!("writes {t}"));
        // Every file under a root rewritten (`find ROOT -exec dd of={}`): its contents are gone.
        if a.found == Found::Every && self.wipes_root(a) {
            self.raise(
                CommandClass::Dangerous,
                format!("rewrites every file find finds under {t}, which may be a grant directory"),
            );
        }
        if a.pattern && !self.globbed.contains(&shown) {
            self.globbed.push(shown.clone());
        }
        if !self.in_link
            && self.other_writes.len() < MAX_WRITES
            && !self.other_writes.contains(&shown)
        {
            self.other_writes.push(shown.clone());
        }
        let content = !self.in_link && !self.in_meta;
        if content
            && self.content_writes.len() < MAX_WRITES
            && !self.content_writes.contains(&shown)
        {
            self.content_writes.push(shown.clone());
        }
        self.push_write(shown);
    }

    /// A link named `name` to `source` (`symbolic`: a relative source is relative to the
    /// link's directory): remembered, see `finish`.
    pub(super) fn made_link(&mut self, source: &Arg, name: &str, symbolic: bool) {
        let Some(t) = source.text() else {
            self.raise(
                CommandClass::ShellComplex,
                format!(
                    "a link to a path the classifier cannot read ({})",
                    source.raw
                ),
            );
            return;
        };
        let link = self.land(name);
        let target = match Path::new(&link).parent() {
            Some(dir) if symbolic && !t.starts_with('/') => {
                dir.join(t).to_string_lossy().into_owned()
            }
            _ => self.land(t),
        };
        if !self.links.contains(&(link.clone(), target.clone())) {
            self.links.push((link, target));
        }
    }

    pub(super) fn push_write(&mut self, w: String) {
        if self.writes.len() >= MAX_WRITES {
            self.beyond(Bound::Writes);
            return;
        }
        if !self.writes.contains(&w) {
            self.writes.push(w);
        }
    }

    /// Whether `a` moved away empties a root: the root or a directory holding one, or every
    /// entry of one (`/srv/notes/*`, `*` where the working directory may be a root).
    pub(super) fn empties_root(&self, a: &Arg) -> bool {
        match a.text() {
            Some(t) if a.pattern => {
                let last = t.rsplit('/').next().unwrap_or(t);
                !crate::glob::has_literal(last) && self.wipes_root(a)
            }
            _ => self.wipes_root(a),
        }
    }

    /// Whether `a` names a grant directory or one holding it by itself (`/srv/notes`, `~`,
    /// `.`, `..`), not a name that may be one only because the working directory is unknown.
    pub(super) fn names_root(&self, a: &Arg) -> bool {
        let Some(t) = a.text() else { return false };
        let plain = !t.starts_with('/') && !t.starts_with('~') && self.cwd.is_none();
        let climbs = {
            let p = normalise(Path::new(t));
            p.as_os_str().is_empty() || p.starts_with("..")
        };
        a.found == Found::No && !a.pattern && (!plain || climbs) && self.wipes_root(a)
    }

    /// Whether a pattern (landed where the walk knows) may match a grant directory or one
    /// holding it: by its whole path, or, relative to a directory the walk does not know, by
    /// its last component.
    fn pattern_matches_root(&self, pattern: &str) -> bool {
        let landed = self.land(pattern);
        let last = landed
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&landed);
        self.roots.iter().any(|r| {
            normalise(r).ancestors().any(|h| {
                let whole = crate::glob::matches(&landed, &h.to_string_lossy());
                let name = h
                    .file_name()
                    .map(|n| crate::glob::matches(last, &n.to_string_lossy()));
                whole != Some(false) || (!landed.starts_with('/') && name.flatten() == Some(true))
            })
        })
    }

    /// Whether a path is outside every grant directory (so what goes there leaves the grant).
    pub(super) fn outside_roots(&self, a: &Arg) -> bool {
        let Some(t) = a.text() else { return true };
        let p = normalise(Path::new(&self.land(t)));
        p.has_root() && !self.roots.iter().any(|r| p.starts_with(normalise(r)))
    }

    /// Whether a target is a grant root, an ancestor of one, `/`, `~` or a working directory
    /// that may be one.
    pub(super) fn wipes_root(&self, a: &Arg) -> bool {
        let Some(t) = a.text() else { return true };
        // `{a,b}` forms: any of the words it makes.
        if a.pattern && t.contains('{') {
            if let Some(words) = crate::glob::alternatives(t).filter(|w| w.len() > 1) {
                return words.iter().any(|w| {
                    let word = Arg {
                        pattern: crate::glob::is_pattern(w),
                        ..a.with_text(w)
                    };
                    self.wipes_root(&word)
                });
            }
        }
        let mut t = t.to_string();
        if a.pattern {
            // `/srv/notes/*` wipes `/srv/notes`; `*.o` wipes what it matches, which is a root
            // (or holds one) only when the pattern matches one, or `.` or `..`.
            let last = t
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or(&t)
                .to_string();
            if crate::glob::has_literal(&last) {
                let dots = [".", ".."]
                    .iter()
                    .any(|d| crate::glob::matches(&last, d) != Some(false));
                return dots || self.pattern_matches_root(&t);
            }
            let cut = t.find(['*', '?', '[', '{', '}']).unwrap_or(t.len());
            let dir_end = t[..cut].rfind('/').map(|i| i + 1).unwrap_or(0);
            t.truncate(dir_end);
        }
        if let Some(rest) = t.strip_prefix('~') {
            let after_user = rest.find('/').map(|i| &rest[i..]).unwrap_or("");
            return normalise(Path::new(&format!(".{after_user}")))
                .as_os_str()
                .is_empty();
        }
        let p = normalise(Path::new(&self.land(&t)));
        // Through a link the command made: `ln -s /srv x; rm -rf x/notes`.
        for (link, target) in &self.links {
            let rest = p.strip_prefix(normalise(Path::new(link))).ok();
            if let Some(rest) = rest.filter(|_| !link.is_empty()) {
                let through = normalise(&Path::new(target).join(rest));
                if through.has_root()
                    && self
                        .roots
                        .iter()
                        .any(|r| normalise(r).starts_with(&through))
                {
                    return true;
                }
            }
        }
        if !p.has_root() {
            // Relative to a working directory the classifier does not know: `.`, `*` and
            // anything climbing out with `..` may be a root.
            return !self.strict_roots
                && (self.cwd_unknown || p.as_os_str().is_empty() || p.starts_with(".."));
        }
        if p == Path::new("/") || self.reroot == Reroot::Unknown {
            return true;
        }
        self.roots.iter().any(|r| {
            let r = normalise(r);
            r.starts_with(&p)
        })
    }
}
