//! brokerd's configuration: the `boxmaker-config` crate (docs/design.md#config), whose owners'
//! check asks the system's user database here.

use std::path::Path;

pub use boxmaker_config::*;

/// Reads and checks the config at `path` as [`boxmaker_config::load`] does, the owners of the
/// grant directories looked up in the system's users and groups (NSS).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    boxmaker_config::load(path, &crate::sys::System)
}
