//! car-builtin-tools: the built-in agent tools behind `agents.register_basics`.
//!
//! Owns: the built-in tools' behaviour and their confinement to one workspace root. Must not
//! touch: anything outside that root, sockets, processes, or the daemon's state (it is handed a
//! `Workspace`).
//!
//! The daemon executes these tools itself (no reverse call to the client), each confined to
//! one workspace root:
//!
//! | tool         | mutating | what it does                                        | module |
//! |--------------|----------|-----------------------------------------------------|--------|
//! | `read_file`  | no       | a line-numbered page of a UTF-8 file                | [`read`] |
//! | `write_file` | yes      | create / overwrite (atomic) / append                | [`mod@write`] |
//! | `edit_file`  | yes      | exact, unique (or `replace_all`) text replacement   | [`edit`] |
//! | `list_dir`   | no       | one directory's entries                             | [`walk`] |
//! | `find_files` | no       | files by glob                                       | [`walk`], [`glob`] |
//! | `grep_files` | no       | lines matching a regex                              | [`grep`] |
//! | `calculate`  | no       | arithmetic                                          | [`calc`] |
//!
//! Each module's docs give the exact params, result shape and bounds of its tool;
//! [`confine`] is the confinement rule (the security core), [`ledger`] the read-before-edit
//! guard, [`params`] the params conventions, [`error`] the error kinds.
//!
//! # Use
//!
//! ```no_run
//! use car_builtin_tools::{descriptors, is_builtin, ReadLedger, Workspace};
//! use serde_json::json;
//!
//! let ws = Workspace::new("/path/to/project")?;    // canonicalized once
//! let ledger = ReadLedger::new();                  // one per session
//! for d in descriptors() { let _ = (d.name, d.description, &d.parameters, d.mutating); }
//! assert!(is_builtin("read_file"));
//! let page = ws.execute("read_file", &json!({"path": "README.md"}), &ledger)?;
//! # Ok::<(), car_builtin_tools::ToolError>(())
//! ```
//!
//! Everything is synchronous and blocking (the daemon calls it inside `spawn_blocking`).
//! [`Workspace`] and [`ReadLedger`] are `Send + Sync`. The crate does no approval itself:
//! the daemon gates the [mutating](ToolDescriptor::mutating) tools before calling
//! [`Workspace::execute`].

pub mod calc;
pub mod confine;
pub mod descriptors;
pub mod edit;
pub mod error;
pub mod fsio;
pub mod glob;
pub mod grep;
pub mod ledger;
pub mod params;
pub mod read;
pub mod walk;
pub mod write;

use serde_json::Value;

pub use confine::Workspace;
pub use descriptors::{
    descriptor, descriptors, is_builtin, is_mutating, ToolDescriptor, TOOL_NAMES,
};
pub use error::{RefusalReason, ToolError};
pub use ledger::ReadLedger;

impl Workspace {
    /// Runs built-in tool `tool` with `params` (a JSON object; `null` counts as `{}`),
    /// recording reads in and checking modifications against `ledger` (the session's).
    /// Returns the tool's result object, or an error whose kind tells invalid params,
    /// policy refusal and failure apart.
    pub fn execute(
        &self,
        tool: &str,
        params: &Value,
        ledger: &ReadLedger,
    ) -> Result<Value, ToolError> {
        if !is_builtin(tool) {
            return Err(ToolError::UnknownTool {
                name: tool.to_string(),
            });
        }
        let params = params::Params::new(params)?;
        let result = match tool {
            "read_file" => read::read_file(self, &params, ledger),
            "write_file" => write::write_file(self, &params, ledger),
            "edit_file" => edit::edit_file(self, &params, ledger),
            "list_dir" => walk::list_dir(self, &params),
            "find_files" => walk::find_files(self, &params),
            "grep_files" => grep::grep_files(self, &params),
            "calculate" => calc::calculate(&params),
            other => Err(ToolError::UnknownTool {
                name: other.to_string(),
            }),
        };
        if let Err(err) = &result {
            tracing::debug!(tool, kind = err.kind(), error = %err, "built-in tool call failed");
        }
        result
    }
}
