//! Session, call and grant names (docs/design.md#protocol): 1 to 64 of `A-Za-z0-9_.-`, not
//! `.` or `..`. They end up in container, directory, cgroup and label names, so the rule is
//! written once, here, and an [`Ident`] in hand is one that passed it.

use std::fmt;

/// The longest identifier.
pub const MAX_IDENT: usize = 64;

/// Whether `s` may be a session, call or grant name.
pub fn valid_ident(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_IDENT
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A string that is a valid identifier, made by [`Ident::parse`] (or [`Ident::fixed`] for a
/// name written in the code).
///
/// ```compile_fail,E0423
/// let id = proto::ident::Ident(String::from("../x"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ident(String);

/// A string that is not an identifier; the text says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an identifier: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..")]
pub struct NotIdent(pub String);

impl Ident {
    pub fn parse(s: impl Into<String>) -> Result<Ident, NotIdent> {
        let s = s.into();
        if valid_ident(&s) {
            Ok(Ident(s))
        } else {
            Err(NotIdent(s))
        }
    }

    /// A name written in the code (`"preflight"`). Checked like any other: a literal that is
    /// not an identifier fails debug builds (the tests) and becomes `invalid-name` in release,
    /// so an `Ident` is an identifier whatever the code says.
    #[track_caller]
    pub fn fixed(s: &'static str) -> Ident {
        debug_assert!(valid_ident(s), "{s:?} is not an identifier");
        if valid_ident(s) {
            Ident(s.to_string())
        } else {
            Ident("invalid-name".to_string())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::ops::Deref for Ident {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Ident {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Ident {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Ident> for String {
    fn from(i: Ident) -> String {
        i.0
    }
}

impl TryFrom<String> for Ident {
    type Error = NotIdent;
    fn try_from(s: String) -> Result<Ident, NotIdent> {
        Ident::parse(s)
    }
}

impl serde::Serialize for Ident {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Ident {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ident, D::Error> {
        let s = String::deserialize(d)?;
        Ident::parse(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        let long = "a".repeat(65);
        let cases = [
            ("s1", true),
            ("A-z_0.9", true),
            (&"a".repeat(64)[..], true),
            ("", false),
            (".", false),
            ("..", false),
            ("...", true),
            (&long[..], false),
            ("a/b", false),
            ("a b", false),
            ("é", false),
            ("a\n", false),
            ("a\0", false),
        ];
        for (s, ok) in cases {
            assert_eq!(valid_ident(s), ok, "{s:?}");
            assert_eq!(Ident::parse(s).is_ok(), ok, "{s:?}");
        }
    }

    #[test]
    fn parsed_identifiers_keep_their_text_and_reject_through_serde() {
        let id = Ident::parse("notes").expect("valid");
        assert_eq!(
            (id.as_str(), id.to_string()),
            ("notes", "notes".to_string())
        );
        assert_eq!(serde_json::to_string(&id).expect("json"), r#""notes""#);
        let back: Ident = serde_json::from_str(r#""notes""#).expect("valid");
        assert_eq!(back, id);
        assert!(serde_json::from_str::<Ident>(r#""../x""#).is_err());
        assert_eq!(
            Ident::parse("a b").map_err(|e| e.to_string()),
            Err(
                "\"a b\" is not an identifier: 1 to 64 of A-Z a-z 0-9 _ . -, not . or .."
                    .to_string()
            )
        );
    }
}
