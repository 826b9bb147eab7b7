//! The user's price table, `$CAR_HOME/prices.json`: `{"<model id>": CostModel, …}` (CAR's
//! `CostModel` shape, per 1M tokens). A model listed there is priced by it instead of the
//! `cost` it was registered with, so a user can correct or add prices without
//! re-registering; a model in neither is unpriced (`cost_usd: null`, never 0).
//!
//! The file is read at most [`MAX_BYTES`] (through `car_proto::safe_file`) and re-read when its
//! modification time changes. A file that does not parse is ignored as a whole and an entry
//! with a bad price is ignored alone, each with a warning naming it: a typo in a price must
//! not fail inference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use car_proto::pricing::CostModel;
use car_proto::safe_file::{self, ReadLimits};

/// The most bytes of `prices.json` read.
pub const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug)]
pub struct PriceTable {
    path: PathBuf,
    cached: Mutex<(Option<SystemTime>, BTreeMap<String, CostModel>)>,
}

impl PriceTable {
    pub fn open(state_root: &Path) -> Self {
        PriceTable {
            path: state_root.join("prices.json"),
            cached: Mutex::new((None, BTreeMap::new())),
        }
    }

    fn load(&self) -> BTreeMap<String, CostModel> {
        let bytes = match safe_file::read(&self.path, ReadLimits::cap(MAX_BYTES)) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return BTreeMap::new(),
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "price table unreadable; ignored");
                return BTreeMap::new();
            }
        };
        let table: BTreeMap<String, serde_json::Value> = match serde_json::from_slice(&bytes) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(file = %self.path.display(), error = %e, "price table does not parse; ignored");
                return BTreeMap::new();
            }
        };
        table
            .into_iter()
            .filter_map(|(model, v)| {
                let cost = serde_json::from_value::<CostModel>(v)
                    .map_err(|e| e.to_string())
                    .and_then(|c| c.check().map(|()| c));
                match cost {
                    Ok(c) => Some((model, c)),
                    Err(e) => {
                        tracing::warn!(file = %self.path.display(), %model, error = %e, "price entry ignored");
                        None
                    }
                }
            })
            .collect()
    }

    /// The table's price for `model`, if it lists one.
    pub fn get(&self, model: &str) -> Option<CostModel> {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let mut cached = self.cached.lock().expect("prices lock");
        if cached.0 != modified || (modified.is_none() && !cached.1.is_empty()) {
            *cached = (modified, self.load());
        }
        cached.1.get(model).cloned()
    }
}
