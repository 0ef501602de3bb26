//! Texts kept as data with `{placeholder}`s filled from the recording: the check that a text
//! uses only the placeholders its code fills (run when the knowledge base loads), and the fill.

/// The `{name}`s of `template` that are not in `known`: a misspelling would otherwise reach the
/// report as it is.
pub(crate) fn unknown_placeholders<'t>(template: &'t str, known: &[&str]) -> Vec<&'t str> {
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let name = &after[..close];
        if !known.contains(&name) {
            unknown.push(name);
        }
        rest = &after[close + 1..];
    }
    unknown
}

/// `template` with each `{name}` of `values` replaced by its value.
pub(crate) fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut s = template.to_owned();
    for (k, v) in values {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_placeholders_are_found_and_known_ones_filled() {
        assert_eq!(unknown_placeholders("keeps {retained} ({shar})", &["retained", "share"]), vec!["shar"]);
        assert!(unknown_placeholders("no braces", &[]).is_empty());
        assert_eq!(fill("{a} and {b}", &[("a", "1".into()), ("b", "{x}".into())]), "1 and {x}");
    }
}
