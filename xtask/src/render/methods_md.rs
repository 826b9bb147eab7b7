//! `docs/methods.md`: every method this daemon serves, by namespace, with CAR's role label,
//! its gates and the typed binding members (Python names and CAR's Python types).

use std::fmt::Write;

use car_proto::methods::{self, ArgKind, ReturnKind};

fn kind(k: ArgKind) -> &'static str {
    match k {
        ArgKind::Str => "str",
        ArgKind::Int => "int",
        ArgKind::Float => "float",
        ArgKind::Bool => "bool",
        ArgKind::StrList => "list[str]",
        ArgKind::IntList => "list[int]",
        ArgKind::Json => "json",
    }
}

fn returns(k: ReturnKind) -> &'static str {
    match k {
        ReturnKind::Unit => "None",
        ReturnKind::Json => "json",
        ReturnKind::Text => "str",
        ReturnKind::Int => "int",
        ReturnKind::Bool => "bool",
        ReturnKind::StrList => "list[str]",
    }
}

/// `docs/methods.md`: every declared method (the `--debug-methods` ones too), by namespace.
pub fn render() -> String {
    let mut out = String::from(
        "# Methods served\n\n\
         Generated from the method contract (`core/src/methods/`) by `cargo xtask codegen`;\n\
         do not edit by hand. Role is CAR's label (`host` methods need a host session). Members\n\
         are the typed binding members (Python names; Node and Kotlin/Swift use lowerCamelCase);\n\
         every method also has a JSON-string wrapper. `debug.*` methods exist only with\n\
         `--debug-methods`.\n",
    );
    for namespace in methods::NAMESPACES {
        let mut decls: Vec<_> = namespace.iter().collect();
        decls.sort_by_key(|d| d.name());
        let mut names: Vec<&str> = decls
            .iter()
            .map(|d| d.name().split('.').next().unwrap_or(""))
            .collect();
        names.dedup();
        write!(
            out,
            "\n## {}\n\n| method | role | gates | members |\n|---|---|---|---|\n",
            names.join(", ")
        )
        .unwrap();
        for d in decls {
            let mut gates = Vec::new();
            if d.spec.handshake_required {
                gates.push("handshake".to_string());
            }
            if let Some(c) = d.spec.capability {
                gates.push(format!("`{c}`"));
            }
            if d.spec.debug {
                gates.push("debug only".into());
            }
            let members: Vec<String> = d
                .members
                .iter()
                .map(|m| {
                    let args: Vec<String> = m
                        .args
                        .iter()
                        .map(|a| {
                            if a.optional {
                                format!("{}: {}=None", a.name, kind(a.kind))
                            } else {
                                format!("{}: {}", a.name, kind(a.kind))
                            }
                        })
                        .collect();
                    format!(
                        "`{}({}) -> {}`",
                        m.name,
                        args.join(", "),
                        returns(m.returns.kind)
                    )
                })
                .collect();
            writeln!(
                out,
                "| `{}` | {} | {} | {} |",
                d.name(),
                d.spec.role.as_str(),
                gates.join(", "),
                members.join("<br>")
            )
            .unwrap();
        }
    }
    out
}
