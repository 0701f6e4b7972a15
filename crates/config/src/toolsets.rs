//! `[toolsets.NAME]` and a grant's `toolset` (docs/design.md#toolsets): the tool tree a grant's
//! sandboxes run, named by content. A grant without `toolset` runs the built-in `base`
//! toolset, `[runner] image` and `[bwrap] tools_root`, so a config without toolsets runs as
//! it always did.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::check::{check_image, Checker};
use super::error::UnknownToolset;
use super::raw::{RawGrant, RawToolset, S};
use super::{Backend, ConfigError, Problem};

/// The built-in toolset's name: `[runner] image` and `[bwrap] tools_root`.
pub const BASE_TOOLSET: &str = "base";

/// `[toolsets.NAME]`, checked: what a sandbox of one of its grants runs instead of the base
/// toolset's image or tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolset {
    pub name: String,
    /// Pinned by content as `[runner] image` is; empty only with `backend = "bwrap"`.
    pub image: String,
    /// The read-only root of bwrap's sandboxes; `None` only with `backend = "podman"`.
    pub tree: Option<PathBuf>,
    /// bwrap: a file listing the store paths bound read-only beside `tree`, each at its own
    /// path (a Nix closure's `store-paths`); read at each call, as `tree` is.
    pub store_paths: Option<PathBuf>,
}

impl Checker<'_> {
    /// Every `[toolsets.NAME]`, by name. Each names what its backend runs: `image` for
    /// Podman, `tree` for bwrap; the other key may be there too (one config for both).
    pub(super) fn toolsets(
        &self,
        raw: &BTreeMap<S<String>, S<RawToolset>>,
        backend: Option<Backend>,
    ) -> Result<BTreeMap<String, Toolset>, ConfigError> {
        let mut toolsets = BTreeMap::new();
        for (name, t) in raw {
            let n = name.get_ref();
            if n == BASE_TOOLSET {
                return self.err(Some(name.span()), "toolsets", Problem::ToolsetBase);
            }
            if !proto::ident::valid_ident(n) {
                let problem = Problem::ToolsetName(n.clone());
                return self.err(Some(name.span()), "toolsets", problem);
            }
            let key = |k: &str| format!("toolsets.{n}.{k}");
            let (table, t) = (t.span(), t.get_ref());
            let image = match &t.image {
                Some(img) => {
                    check_image(img.get_ref())
                        .or_else(|p| self.err(Some(img.span()), &key("image"), p))?;
                    img.get_ref().clone()
                }
                None if backend == Some(Backend::Podman) => {
                    let problem = Problem::ToolsetNeeds("image", Backend::Podman);
                    return self.err(Some(table), &key("image"), problem);
                }
                None => String::new(),
            };
            let tree = match &t.tree {
                Some(tree) => {
                    Some(self.absolute(tree.get_ref(), Some(tree.span()), &key("tree"))?)
                }
                None if backend == Some(Backend::Bwrap) => {
                    let problem = Problem::ToolsetNeeds("tree", Backend::Bwrap);
                    return self.err(Some(table), &key("tree"), problem);
                }
                None => None,
            };
            let store_paths = match &t.store_paths {
                Some(_) if tree.is_none() => {
                    let problem = Problem::ToolsetStorePathsWithoutTree;
                    return self.err(Some(table), &key("store_paths"), problem);
                }
                Some(p) => Some(self.absolute(p.get_ref(), Some(p.span()), &key("store_paths"))?),
                None => None,
            };
            let name = n.clone();
            let toolset = Toolset {
                name: name.clone(),
                image,
                tree,
                store_paths,
            };
            toolsets.insert(name, toolset);
        }
        Ok(toolsets)
    }

    /// A grant's `toolset`: `None` for the base toolset (left out or written `"base"`), else
    /// the name of one of `toolsets`.
    pub(super) fn grant_toolset(
        &self,
        grant: &str,
        g: &RawGrant,
        toolsets: &BTreeMap<String, Toolset>,
    ) -> Result<Option<String>, ConfigError> {
        let Some(t) = &g.toolset else {
            return Ok(None);
        };
        let name = t.get_ref();
        if name == BASE_TOOLSET {
            return Ok(None);
        }
        if !toolsets.contains_key(name) {
            let known = std::iter::once(BASE_TOOLSET)
                .chain(toolsets.keys().map(String::as_str))
                .collect::<Vec<_>>()
                .join(", ");
            let problem = Problem::UnknownToolset(Box::new(UnknownToolset {
                name: name.clone(),
                known,
            }));
            return self.err(Some(t.span()), &format!("grants.{grant}.toolset"), problem);
        }
        Ok(Some(name.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::IMAGE;
    use super::super::{parse, Config};

    fn config(text: &str) -> Result<Config, String> {
        parse(text, "c.toml").map_err(|e| e.to_string())
    }

    /// A Podman config with `toolsets` and one grant with `grant` added.
    fn podman(toolsets: &str, grant: &str) -> String {
        let dir = std::env::temp_dir().display().to_string();
        format!(
            "[runner]\nimage = \"{IMAGE}\"\n{toolsets}\n[grants.g]\ntools = [\"shell\"]\npaths = [{{ path = {dir:?} }}]\n{grant}\n"
        )
    }

    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    #[test]
    fn a_grant_without_a_toolset_runs_the_base_one() {
        for grant in ["", "toolset = \"base\""] {
            let cfg = config(&podman("", grant)).expect("config");
            assert_eq!(cfg.grants["g"].toolset, None, "{grant:?}");
            assert!(cfg.toolsets.is_empty());
            assert_eq!(cfg.toolset_of(&cfg.grants["g"]), None);
        }
    }

    #[test]
    fn a_grant_names_its_toolset() {
        let toolsets = format!("[toolsets.c]\nimage = \"{C}\"\ntree = \"/srv/toolsets/c/\"\n");
        let cfg = config(&podman(&toolsets, "toolset = \"c\"")).expect("config");
        let t = cfg.toolset_of(&cfg.grants["g"]).expect("toolset");
        assert_eq!(t.name, "c");
        assert_eq!(t.image, C);
        assert_eq!(
            t.tree.as_deref(),
            Some(std::path::Path::new("/srv/toolsets/c"))
        );
        // bwrap needs the tree alone.
        let bwrap = podman("[toolsets.c]\ntree = \"/srv/c\"\n", "toolset = \"c\"")
            .replace("[runner]\n", "[runner]\nbackend = \"bwrap\"\n");
        let cfg = config(&bwrap).expect("bwrap config");
        assert_eq!(cfg.toolsets["c"].image, "");
    }

    /// (toolsets, grant's lines, the whole error)
    #[test]
    fn bad_toolsets_say_where_and_what() {
        let table: Vec<(String, &str, String)> = vec![
            (
                String::new(),
                "toolset = \"c\"",
                "c.toml:7:11: grants.g.toolset: \"c\" is not a toolset: the toolsets are base".into(),
            ),
            (
                format!("[toolsets.cc]\nimage = \"{C}\""),
                "toolset = \"c\"",
                "c.toml:8:11: grants.g.toolset: \"c\" is not a toolset: the toolsets are base, cc".into(),
            ),
            (
                format!("[toolsets.base]\nimage = \"{C}\""),
                "",
                "c.toml:3:11: toolsets: \"base\" is the built-in toolset ([runner] image and [bwrap] tools_root) and cannot be defined again".into(),
            ),
            (
                format!("[toolsets.\"a b\"]\nimage = \"{C}\""),
                "",
                "c.toml:3:11: toolsets: \"a b\" is not a toolset name: 1 to 64 of A-Z a-z 0-9 _ . -, not . or ..".into(),
            ),
            (
                "[toolsets.c]\nimage = \"gcc:12\"".into(),
                "",
                "c.toml:4:9: toolsets.c.image: \"gcc:12\" is a tag; pin the image by content (sha256:<64 hex> or name@sha256:<64 hex>)".into(),
            ),
            (
                "[toolsets.c]\ntree = \"/srv/c\"".into(),
                "",
                "c.toml:3:1: toolsets.c.image: is required with backend = \"podman\": the toolset's image pinned for that backend".into(),
            ),
            (
                format!("[toolsets.c]\nimage = \"{C}\"\ntree = \"srv/c\""),
                "",
                "c.toml:5:8: toolsets.c.tree: \"srv/c\" is not an absolute path".into(),
            ),
            (
                format!("[toolsets.c]\nimage = \"{C}\"\nstore_paths = \"/nix/store/x-closure/store-paths\""),
                "",
                "c.toml:3:1: toolsets.c.store_paths: needs the toolset's tree: the store paths are bound beside it".into(),
            ),
            (
                format!("[toolsets.c]\nimage = \"{C}\"\ntree = \"/srv/c\"\nstore_paths = \"store-paths\""),
                "",
                "c.toml:6:15: toolsets.c.store_paths: \"store-paths\" is not an absolute path".into(),
            ),
        ];
        let mut wrong = Vec::new();
        for (toolsets, grant, want) in table {
            let text = podman(&toolsets, grant);
            let got = config(&text).err();
            if got.as_deref() != Some(want.as_str()) {
                wrong.push(format!("{text}\n  got  {got:?}\n  want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        let bwrap = podman(&format!("[toolsets.c]\nimage = \"{C}\""), "")
            .replace("[runner]\n", "[runner]\nbackend = \"bwrap\"\n");
        assert_eq!(
            config(&bwrap).err().as_deref(),
            Some("c.toml:4:1: toolsets.c.tree: is required with backend = \"bwrap\": the toolset's tree pinned for that backend")
        );
    }
}
