//! The engine's only templating: `{{item}}`/`{{index}}` in a `for_each` body and
//! `{{payload}}` in `deliver` sinks (also written `{{ item }}`). Substitution is textual in
//! every string value (object keys are left alone): a string is inserted as it is, any
//! other JSON value as compact JSON. Nothing else is templated; `{{other}}` stays literal.

use serde_json::Value;

/// How a value reads inside a template: strings raw, everything else as compact JSON.
pub(crate) fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Replace each `{{name}}` in every string inside `value`, in one pass (an inserted value
/// is never itself expanded).
pub(crate) fn substitute(value: &mut Value, vars: &[(&str, String)]) {
    match value {
        Value::String(s) if s.contains("{{") => *s = expand(s, vars),
        Value::Array(items) => items.iter_mut().for_each(|v| substitute(v, vars)),
        Value::Object(map) => map.values_mut().for_each(|v| substitute(v, vars)),
        _ => {}
    }
}

fn expand(s: &str, vars: &[(&str, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let found = after.find("}}").and_then(|close| {
            let name = after[..close].trim();
            let (_, replacement) = vars.iter().find(|(n, _)| *n == name)?;
            Some((close, replacement))
        });
        match found {
            Some((close, replacement)) => {
                out.push_str(replacement);
                rest = &after[close + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn substitutes_in_nested_strings_only() {
        let mut v = json!({"task": "do {{item}} #{{ index }}", "keep": "{{appr}} {{", "{{item}}": [1, "{{item}}"]});
        substitute(
            &mut v,
            &[("item", render(&json!({"a": 1}))), ("index", "3".into())],
        );
        assert_eq!(
            v,
            json!({"task": "do {\"a\":1} #3", "keep": "{{appr}} {{", "{{item}}": [1, "{\"a\":1}"]})
        );
    }

    #[test]
    fn inserted_text_is_not_expanded_again() {
        let vars = [
            ("item", "{{index}}".to_string()),
            ("index", "0".to_string()),
        ];
        assert_eq!(expand("{{item}}/{{index}}", &vars), "{{index}}/0");
    }
}
