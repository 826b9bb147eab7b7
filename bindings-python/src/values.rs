//! Python values in and out of a typed member call.
//!
//! This module owns the conversion between the Python values a generated member passes
//! (`str`, `int`, `float`, `bool`, lists of them, `None`) and JSON values, and back from a
//! projected result. It checks nothing the contract declares: whether a value has the
//! declared kind is `car_daemon_client::typed`'s decision, so every binding reports it the
//! same way. Only what JSON cannot carry (an `int` beyond 64 bits, a NaN, an object of some
//! other class) is refused here, naming the member and argument.

use car_daemon_client::{Error, Projected};
use car_proto::methods::Member;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

/// A Python value as JSON, or why it cannot be one.
fn to_json(value: &Bound<'_, PyAny>) -> Result<Value, String> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        return value
            .extract::<i64>()
            .map(Value::from)
            .map_err(|_| "must fit in a 64-bit integer".to_string());
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| "must be a finite number".to_string());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return s
            .to_cow()
            .map(|s| Value::String(s.into_owned()))
            .map_err(|e| format!("is not valid text: {e}"));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in value.try_iter().map_err(|e| e.to_string())? {
            items.push(to_json(&item.map_err(|e| e.to_string())?)?);
        }
        return Ok(Value::Array(items));
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| "must have string keys".to_string())?
                .to_string();
            map.insert(key, to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    let type_name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into());
    Err(format!("cannot be sent: got {type_name}"))
}

/// The arguments of a call of `member`, as `typed::build_params` takes them.
pub(crate) fn args(
    member: &Member,
    values: &Bound<'_, PyAny>,
) -> Result<Vec<Option<Value>>, Error> {
    let mut out = Vec::new();
    let items = values
        .try_iter()
        .map_err(|_| Error::InvalidArgument(format!("{}: args must be a list", member.name)))?;
    for (i, item) in items.enumerate() {
        let item = item.map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let name = member.args.get(i).map_or("an extra argument", |a| a.name);
        let value = to_json(&item)
            .map_err(|why| Error::InvalidArgument(format!("{}: {name} {why}", member.name)))?;
        out.push((!value.is_null()).then_some(value));
    }
    Ok(out)
}

/// A projected result as the Python value the generated member's annotation names.
pub(crate) fn result(py: Python<'_>, projected: Projected) -> PyResult<Py<PyAny>> {
    Ok(match projected {
        Projected::Unit => py.None(),
        Projected::Json(text) | Projected::Text(text) => {
            text.into_pyobject(py)?.into_any().unbind()
        }
        Projected::Int(n) => n.into_pyobject(py)?.into_any().unbind(),
        Projected::Bool(b) => PyBool::new(py, b).to_owned().into_any().unbind(),
        Projected::StrList(items) => PyList::new(py, items)?.into_any().unbind(),
    })
}
