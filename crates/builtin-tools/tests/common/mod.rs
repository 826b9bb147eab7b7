//! Shared set-up for the integration tests: a real temp workspace, a second temp dir that
//! stands for "outside the workspace", and helpers to call tools and check error kinds.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;

use car_builtin_tools::{ReadLedger, RefusalReason, ToolError, Workspace};
use serde_json::Value;
use tempfile::TempDir;

pub struct Env {
    pub root: TempDir,
    pub outside: TempDir,
    pub ws: Workspace,
    pub ledger: ReadLedger,
}

impl Env {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = Workspace::new(root.path()).unwrap();
        Env {
            root,
            outside,
            ws,
            ledger: ReadLedger::new(),
        }
    }

    pub fn run(&self, tool: &str, params: Value) -> Result<Value, ToolError> {
        let result = self.ws.execute(tool, &params, &self.ledger);
        if let Err(e) = &result {
            let root = self.ws.root().to_string_lossy().into_owned();
            let outside = self.outside.path().to_string_lossy().into_owned();
            let text = e.to_string();
            assert!(!text.contains(&root), "error message leaks the root: {e}");
            assert!(
                !text.contains(&outside),
                "error message names the outside: {e}"
            );
        }
        result
    }

    pub fn ok(&self, tool: &str, params: Value) -> Value {
        self.run(tool, params.clone())
            .unwrap_or_else(|e| panic!("{tool} {params} failed: {e:?}"))
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.ws.root().join(rel)
    }

    pub fn put(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    pub fn get(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap()
    }

    pub fn outside_path(&self, rel: &str) -> PathBuf {
        self.outside.path().join(rel)
    }
}

#[track_caller]
pub fn assert_refused(result: Result<Value, ToolError>, reason: RefusalReason) {
    match result {
        Err(ToolError::Refused { reason: r, .. }) => assert_eq!(r, reason),
        other => panic!("expected refusal {reason}, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_invalid(result: Result<Value, ToolError>, field: &str) {
    match result {
        Err(ToolError::InvalidParams { field: f, .. }) => assert_eq!(f, field),
        other => panic!("expected invalid params on {field}, got {other:?}"),
    }
}

#[track_caller]
pub fn assert_failed(result: Result<Value, ToolError>, contains: &str) {
    match result {
        Err(ToolError::Failed { message }) => {
            assert!(message.contains(contains), "{message:?} lacks {contains:?}")
        }
        other => panic!("expected failure containing {contains:?}, got {other:?}"),
    }
}
