//! A small JSON Schema checker: the keywords the committed schema uses (type, required,
//! properties, additionalProperties, items, const, enum, minimum, exclusiveMinimum), and a
//! refusal of any keyword it does not know, so that no part of the schema goes unchecked.

use serde_json::Value;

const ANNOTATIONS: &[&str] = &["$schema", "$id", "title", "description"];

pub fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        errors.push(format!("{path}: the schema is not an object"));
        return;
    };
    for (key, rule) in obj {
        match key.as_str() {
            k if ANNOTATIONS.contains(&k) => {}
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().filter_map(|t| t.as_str()).collect(),
                    _ => vec![],
                };
                if !types.iter().any(|t| type_matches(t, value)) {
                    errors.push(format!("{path}: {value} is not of type {types:?}"));
                }
            }
            "required" => {
                // As in JSON Schema, `required` says nothing about a value that is not an
                // object (`"type": ["object", "null"]` allows null).
                let Some(fields) = value.as_object() else { continue };
                for name in rule.as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
                    if !fields.contains_key(name) {
                        errors.push(format!("{path}: `{name}` is missing"));
                    }
                }
            }
            "properties" => {
                if let (Some(props), Some(fields)) = (rule.as_object(), value.as_object()) {
                    for (name, sub) in props {
                        if let Some(v) = fields.get(name) {
                            validate(sub, v, &format!("{path}.{name}"), errors);
                        }
                    }
                }
            }
            "additionalProperties" => {
                let Some(fields) = value.as_object() else { continue };
                let known = obj.get("properties").and_then(|p| p.as_object());
                for (name, v) in fields {
                    if known.is_some_and(|k| k.contains_key(name)) {
                        continue;
                    }
                    match rule {
                        Value::Bool(false) => errors.push(format!("{path}: `{name}` is not allowed")),
                        Value::Bool(true) => {}
                        sub => validate(sub, v, &format!("{path}.{name}"), errors),
                    }
                }
            }
            "items" => {
                for (i, v) in value.as_array().into_iter().flatten().enumerate() {
                    validate(rule, v, &format!("{path}[{i}]"), errors);
                }
            }
            "const" => {
                if rule != value {
                    errors.push(format!("{path}: {value} is not {rule}"));
                }
            }
            "enum" => {
                if !rule.as_array().is_some_and(|a| a.contains(value)) {
                    errors.push(format!("{path}: {value} is not one of {rule}"));
                }
            }
            "minimum" => {
                if let (Some(min), Some(v)) = (rule.as_f64(), value.as_f64()) {
                    if v < min {
                        errors.push(format!("{path}: {v} is below {min}"));
                    }
                }
            }
            "exclusiveMinimum" => {
                if let (Some(min), Some(v)) = (rule.as_f64(), value.as_f64()) {
                    if v <= min {
                        errors.push(format!("{path}: {v} is not above {min}"));
                    }
                }
            }
            other => errors.push(format!("{path}: the checker does not know the keyword `{other}`")),
        }
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}
