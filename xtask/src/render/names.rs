//! The name rule (docs/protocol-choices.md, "Bindings"): split a method on `.` and `/`, snake_case
//! each segment, join with `_`; Node, Kotlin and Swift use the lowerCamelCase of a snake_case name.

/// `memory.add_fact` → `memory_add_fact`; `session.bindSandbox` → `session_bind_sandbox`.
pub fn snake_name(method: &str) -> String {
    method
        .split(['.', '/'])
        .map(snake_segment)
        .collect::<Vec<_>>()
        .join("_")
}

fn snake_segment(segment: &str) -> String {
    let mut out = String::new();
    let mut prev_lower_or_digit = false;
    for c in segment.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower_or_digit {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower_or_digit = false;
        } else if c == '-' {
            out.push('_');
            prev_lower_or_digit = false;
        } else {
            out.push(c);
            prev_lower_or_digit = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// `memory.add_fact` → `memoryAddFact` (what the tests check the rule with).
#[cfg(test)]
pub fn camel_name(method: &str) -> String {
    lower_camel(&snake_name(method))
}

/// `fact_id` → `factId` (a snake_case name in lowerCamelCase).
pub fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
