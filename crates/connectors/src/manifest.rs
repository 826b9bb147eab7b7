//! What a connector is, as persisted in `CAR_HOME/connectors.json` and seeded from a team's
//! `.car/connectors.toml`.
//!
//! A definition never holds a secret: an HTTP connector's header values and a stdio
//! connector's environment values live in the daemon's secret store, and the manifest keeps
//! only their names. The slug is the connector's name lower-cased with every run of other
//! characters than `a-z` and `0-9` turned into one `-` (`"My Files"` → `my-files`); it never
//! holds `_`, so a model-visible tool name `mcp_{slug}_{tool}` names one connector.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How the daemon reaches a connector's server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Transport {
    /// A remote server over Streamable HTTP.
    Http {
        url: String,
        /// The names of the headers sent with every request; the values are secrets.
        #[serde(default)]
        header_names: Vec<String>,
        /// Authorized by OAuth (`connectors.complete_authentication`): a bearer token from
        /// the secret store is sent too, refreshed before it expires.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        oauth: bool,
    },
    /// A local server launched as a child process, spoken to over its stdio.
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        /// The names of the variables set in its environment; the values are secrets.
        #[serde(default)]
        env_names: Vec<String>,
    },
}

/// One connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    pub slug: String,
    pub name: String,
    #[serde(flatten)]
    pub transport: Transport,
    /// The bare server-side names of the tools the user enabled.
    #[serde(default)]
    pub enabled: BTreeSet<String>,
    /// Seeded from `.car/connectors.toml` and not yet changed by the user: not written
    /// back to the user's manifest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seeded: bool,
}

impl Definition {
    /// What `ConnectorStatus.url` shows: the URL, or `stdio:` and the command line.
    pub fn location(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.clone(),
            Transport::Stdio { command, args, .. } => {
                let mut line = format!("stdio:{command}");
                for a in args {
                    line.push(' ');
                    line.push_str(a);
                }
                line
            }
        }
    }
}

/// The persisted set (`connectors.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    #[serde(default)]
    pub connectors: Vec<Definition>,
}

/// The slug of a connector name (see the module docs); `None` when nothing is left.
pub fn slug_of(name: &str) -> Option<String> {
    let mut slug = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_end_matches('-').to_string();
    (!slug.is_empty()).then_some(slug)
}

/// The model-visible name of `tool` on connector `slug`.
pub fn canonical(slug: &str, tool: &str) -> String {
    format!("mcp_{slug}_{tool}")
}

/// One `[[connector]]` of a team's `.car/connectors.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Seed {
    name: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedFile {
    #[serde(default)]
    connector: Vec<Seed>,
}

/// The nearest `.car/connectors.toml` from `start` walking up, if any.
pub fn nearest_seed_file(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(".car").join("connectors.toml"))
        .find(|p| p.is_file())
}

/// The definitions a `.car/connectors.toml` seeds (secret-free: no headers, no
/// environment), or why the file is refused, naming the entry.
pub fn parse_seed(text: &str) -> Result<Vec<Definition>, String> {
    let file: SeedFile = toml::from_str(text).map_err(|e| e.to_string())?;
    file.connector
        .into_iter()
        .enumerate()
        .map(|(i, seed)| {
            let at = format!("connector[{i}]");
            let slug =
                slug_of(&seed.name).ok_or_else(|| format!("{at}.name: needs a letter or digit"))?;
            let transport = match (seed.url, seed.command) {
                (Some(url), None) => Transport::Http {
                    url,
                    header_names: Vec::new(),
                    oauth: false,
                },
                (None, Some(command)) => Transport::Stdio {
                    command,
                    args: seed.args,
                    env_names: Vec::new(),
                },
                _ => return Err(format!("{at}: needs either url or command")),
            };
            Ok(Definition {
                slug,
                name: seed.name,
                transport,
                enabled: BTreeSet::new(),
                seeded: true,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_keep_letters_and_digits_and_never_an_underscore() {
        assert_eq!(slug_of("My Files").as_deref(), Some("my-files"));
        assert_eq!(slug_of("  everything__2 ").as_deref(), Some("everything-2"));
        assert_eq!(slug_of("___"), None);
        assert_eq!(canonical("my-files", "read"), "mcp_my-files_read");
    }

    #[test]
    fn a_seed_file_gives_remote_and_stdio_definitions() {
        let defs = parse_seed(
            "[[connector]]\nname = \"Docs\"\nurl = \"https://example.invalid/mcp\"\n\n\
             [[connector]]\nname = \"fs\"\ncommand = \"npx\"\nargs = [\"server-filesystem\"]\n",
        )
        .unwrap();
        assert_eq!(defs[0].slug, "docs");
        assert!(matches!(&defs[1].transport, Transport::Stdio { command, .. } if command == "npx"));
        assert!(defs.iter().all(|d| d.seeded && d.enabled.is_empty()));
        let err = parse_seed("[[connector]]\nname = \"x\"\n").unwrap_err();
        assert_eq!(err, "connector[0]: needs either url or command");
        assert!(parse_seed("[[connector]]\nname = \"x\"\nurl = \"u\"\nheaders = {}\n").is_err());
    }
}
