//! Typed params of every method, generated from the live schema: decoding never panics,
//! every refusal is `-32602` naming a field path, and no refusal echoes a planted secret.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use car_fuzz::{from_schema, PLANTED};
use car_proto::methods::{self, Declaration};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

struct Live {
    decls: Vec<&'static Declaration>,
    params: Vec<Value>,
    definitions: Map<String, Value>,
}

static LIVE: LazyLock<Live> = LazyLock::new(|| {
    let doc = car_proto::schema::schema(true);
    let decls: Vec<&'static Declaration> = methods::all().collect();
    let rows = doc["methods"].as_array().expect("methods").clone();
    let params = decls
        .iter()
        .map(|d| {
            rows.iter()
                .find(|r| r["name"] == d.name())
                .map(|r| r["params"].clone())
                .expect("every declaration is in the schema")
        })
        .collect();
    let definitions = doc["definitions"].as_object().cloned().unwrap_or_default();
    Live {
        decls,
        params,
        definitions,
    }
});

fuzz_target!(|data: &[u8]| {
    let live = &*LIVE;
    let mut u = Unstructured::new(data);
    let Ok(i) = u.choose_index(live.decls.len()) else {
        return;
    };
    let Ok(params) = from_schema(&mut u, &live.params[i], &live.definitions, None, 8) else {
        return;
    };
    if let Err(e) = live.decls[i].check_params(params) {
        assert_eq!(e.code, -32602, "{}: {e:?}", live.decls[i].name());
        let shown = format!("{e:?} {}", e.message);
        assert!(
            !shown.contains(PLANTED),
            "{}: leaked {shown}",
            live.decls[i].name()
        );
    }
});
