//! The built-in classifications' texts (kb/builtin.toml): what onefix says of a line that no
//! knowledge-base entry explains, and of the rewrites that move or re-word a finding. The code
//! decides when a rule applies; the words are data, checked when they load.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::template::{fill, unknown_placeholders};
use crate::Kind;

/// One rule's words.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleText {
    pub kind: Option<Kind>,
    pub what: Option<String>,
    pub why: String,
    pub fix: Option<String>,
}

/// Each rule the code uses, and the placeholders it fills for it.
const RULES: &[(&str, &[&str])] = &[
    ("blocked", &["blocked_percent"]),
    ("c-call", &["call"]),
    ("self-time", &[]),
    ("hot-call", &["callee"]),
    ("query-once-per-pass", &["callee"]),
    ("call-in-loop-condition", &["why"]),
    ("concurrent-waits", &["mean", "window_ms", "peak"]),
    ("serial-waits", &["why", "mean", "window_ms", "peak"]),
    ("serial-span", &["why", "calls", "slowest_ms", "total_s", "remaining_s", "run_s"]),
    ("serial-span-nested", &["why", "calls", "slowest_ms", "total_s", "remaining_s", "run_s", "outer_line"]),
    ("lazy-setup", &["why", "line"]),
    ("lazy-setup-no-bound", &["line"]),
    ("single-wait", &[]),
    ("cpu-cap", &["why", "cpu_seconds", "stretch_seconds", "cpus", "cap"]),
    ("holds-lock", &["why", "fix", "lock_at", "held_at", "waits_percent"]),
    ("holds-gil", &["why", "fix", "waits_percent"]),
    ("repeated-walk", &["walk_at", "walk_code", "function", "part"]),
    ("loop-iteration", &["loop_at", "lines", "parts"]),
    ("object-per-call", &["class", "entries", "lines", "top", "top_at", "depth", "loop_at"]),
    ("object-per-call-nested", &["class", "entries", "lines", "top", "top_at", "depth", "loop_at"]),
    ("object-per-item", &["class", "entries", "lines", "top", "top_at", "depth", "loop_at"]),
    ("rescan-growing", &["var", "grow_at"]),
    ("recursion-rescan", &["function", "depth"]),
    ("search-from-advancing-position", &["call", "text", "var", "loop_at"]),
    ("append-copy", &["var"]),
];

pub(crate) struct Builtins {
    rules: HashMap<String, RuleText>,
}

impl Builtins {
    /// Parses and checks `text`: every rule the code uses is there, no other, and each uses only
    /// the placeholders the code fills for it.
    pub(crate) fn parse(text: &str) -> Result<Builtins, String> {
        let rules: HashMap<String, RuleText> = toml::from_str(text).map_err(|e| e.to_string())?;
        for (id, known) in RULES {
            let rule = rules.get(*id).ok_or_else(|| format!("the rule [{id}] is missing"))?;
            for (field, text) in
                [("what", rule.what.as_deref()), ("why", Some(rule.why.as_str())), ("fix", rule.fix.as_deref())]
            {
                let unknown = unknown_placeholders(text.unwrap_or(""), known);
                if !unknown.is_empty() {
                    return Err(format!(
                        "[{id}] {field} uses {{{}}}, which onefix does not fill there",
                        unknown.join("}, {")
                    ));
                }
            }
        }
        if let Some(extra) = rules.keys().find(|k| !RULES.iter().any(|(id, _)| id == k)) {
            return Err(format!("the rule [{extra}] is used nowhere"));
        }
        Ok(Builtins { rules })
    }

    /// The built-in texts, parsed once.
    pub(crate) fn get() -> &'static Builtins {
        static BUILTINS: OnceLock<Builtins> = OnceLock::new();
        BUILTINS.get_or_init(|| match Builtins::parse(include_str!("../kb/builtin.toml")) {
            Ok(b) => b,
            Err(e) => panic!("kb/builtin.toml: {e} (checked by the tests)"),
        })
    }

    pub(crate) fn rule(&self, id: &str) -> &RuleText {
        &self.rules[id]
    }

    /// The rule's kind; every rule that sets a finding's kind has one.
    pub(crate) fn kind(&self, id: &str) -> Kind {
        self.rule(id).kind.unwrap_or_else(|| panic!("kb/builtin.toml: [{id}] has no kind"))
    }

    pub(crate) fn what(&self, id: &str, values: &[(&str, String)]) -> String {
        fill(self.rule(id).what.as_deref().unwrap_or(""), values)
    }

    pub(crate) fn why(&self, id: &str, values: &[(&str, String)]) -> String {
        fill(&self.rule(id).why, values)
    }

    pub(crate) fn fix(&self, id: &str, values: &[(&str, String)]) -> String {
        fill(self.rule(id).fix.as_deref().unwrap_or(""), values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_texts_load_and_a_misspelled_placeholder_is_refused() {
        let text = include_str!("../kb/builtin.toml");
        Builtins::parse(text).unwrap();
        let bad = text.replace("{callee} and what it calls", "{calee} and what it calls");
        let err = Builtins::parse(&bad).err().unwrap();
        assert!(err.contains("[hot-call] why uses {calee}"), "{err}");
        let unknown_kind = text.replace("kind = \"hot-call\"", "kind = \"hot-cal\"");
        assert!(Builtins::parse(&unknown_kind).err().unwrap().contains("unknown variant"));
        let missing = text.replace("[single-wait]", "[single-waits]");
        assert!(Builtins::parse(&missing).err().unwrap().contains("[single-wait] is missing"));
    }
}
