//! The knowledge base of costly operations, kept as data (`kb/*.toml`), not as code: each
//! entry names frame patterns by language, what kind of cost they are, why it costs and what
//! to change. Patterns are globs (`*` matches anything) over qualified frame names, or over the
//! names a leaf line of source calls into (C functions have no Python frame of their own).

use regex::{Regex, RegexSet};
use serde::Deserialize;

use onefix_model::FrameKind;

/// The knowledge base shipped with onefix.
pub const BUILTIN: &[(&str, &str)] = &[
    ("network.toml", include_str!("../kb/network.toml")),
    ("data.toml", include_str!("../kb/data.toml")),
    ("compute.toml", include_str!("../kb/compute.toml")),
    ("idle.toml", include_str!("../kb/idle.toml")),
];

#[derive(Debug, thiserror::Error)]
pub enum KbError {
    #[error("knowledge base file {file}: {detail}")]
    Invalid { file: String, detail: String },
}

/// How an entry's matches are used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Work that costs: classifies the line it is found under.
    #[default]
    Cost,
    /// A thread parked for want of work (empty queue, `accept`, event loop with nothing to
    /// do, joining others): matched on the innermost frame of a waiting thread, and left out
    /// of the cost.
    Idle,
}

/// When an entry applies, by the state of the thread in the matched samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    #[default]
    Any,
    /// Only samples where the thread was waiting (network waits, sleeps).
    Blocked,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    pub id: String,
    pub kind: crate::Kind,
    #[serde(default)]
    pub role: Role,
    #[serde(default)]
    pub when: When,
    /// "python", "native" or both.
    pub languages: Vec<String>,
    /// Globs over qualified frame names.
    #[serde(default)]
    pub frames: Vec<String>,
    /// Globs over names called on the innermost Python line (for calls into C).
    #[serde(default)]
    pub calls: Vec<String>,
    /// What the operation is, as a noun phrase ("building a TLS context ...").
    pub what: String,
    pub why: String,
    pub fix: String,
    /// The fix in the words of native code (threads, goroutines), when `fix` speaks Python's.
    #[serde(default)]
    pub native_fix: Option<String>,
    /// Qualified names (or `call:NAME`) this entry must classify: its own test.
    pub examples: Vec<String>,
    /// For idle entries: the wait counts in its thread's elapsed time when the thread also
    /// works (an event loop waiting for replies to requests it sent), though no line is charged.
    #[serde(default)]
    pub busy_time: bool,
    /// For idle entries: also matched on any frame (innermost first) of a stack that has no
    /// user code, such as a server's handler thread waiting for the next request.
    #[serde(default)]
    pub anywhere: bool,
    /// For blocked-time entries: a wait on the clock. A thread that spends nearly all its time
    /// in it while other threads work is a background timer (a watchdog, a flusher): idle.
    #[serde(default)]
    pub timer: bool,
    /// The wait ends when another thread of the program acts: a join, a future's result, a
    /// task queue, a lock. The program's critical path follows that thread through the wait;
    /// any other wait (a reply, the clock, a connection) stays on the line that waits.
    #[serde(default)]
    pub woken_by_thread: bool,
    /// A worker taking its next item from a queue that other workers take from too: which of
    /// them does an item depends on who is free, so a pool's items are shared out anew when
    /// what feeds it gets faster (see the critical path's pools).
    #[serde(default)]
    pub shared_queue: bool,
    /// The wait is for child processes of the program (a process pool's workers): a recording
    /// that did not sample them cannot say what they did, and a note says how to.
    #[serde(default)]
    pub child_processes: bool,
    /// Entries whose cost this one brings about when both sit in the same loop (a client built
    /// per pass also opens a new connection per request): reported as one finding.
    #[serde(default)]
    pub also_causes: Vec<String>,
    /// Frames that make the entry's operation once per item of a collection (an ORM's lazy
    /// load of a related object): evidence that the cost repeats within one pass. An entry that
    /// lists them is its kind only with that evidence, or a loop around the line; one query per
    /// request is not an N+1.
    #[serde(default)]
    pub per_item: Vec<String>,
}

impl EntrySpec {
    /// The fix for a line of code of this kind of frame.
    pub fn fix_for(&self, kind: onefix_model::FrameKind) -> &str {
        match (&self.native_fix, kind) {
            (Some(native), onefix_model::FrameKind::Native) => native,
            _ => &self.fix,
        }
    }
}

pub struct Entry {
    pub spec: EntrySpec,
    python: bool,
    native: bool,
    frames: Option<RegexSet>,
    calls: Option<RegexSet>,
    per_item: Option<RegexSet>,
}

impl Entry {
    pub fn matches_frame(&self, kind: FrameKind, qualified: &str) -> bool {
        let lang_ok = match kind {
            FrameKind::Python => self.python,
            FrameKind::Native | FrameKind::Kernel => self.native,
        };
        lang_ok && self.frames.as_ref().is_some_and(|set| set.is_match(qualified))
    }

    /// The frames that make the entry's operation once per item (`per_item`), when the entry
    /// needs evidence of repetition; `None` when it does not.
    pub fn per_item_frames(&self) -> Option<&RegexSet> {
        self.per_item.as_ref()
    }

    pub fn matches_call(&self, name: &str) -> bool {
        self.python && self.calls.as_ref().is_some_and(|set| set.is_match(name))
    }
}

pub struct KnowledgeBase {
    pub entries: Vec<Entry>,
}

impl KnowledgeBase {
    pub fn builtin() -> KnowledgeBase {
        KnowledgeBase::load(BUILTIN.iter().copied()).expect("the built-in knowledge base is valid (tested)")
    }

    /// Whether a waiting thread or task whose innermost frame is `frame` is parked for want of
    /// work (an empty queue, an event, other tasks): an idle entry that is no event-loop wait.
    pub fn parks(&self, frame: &onefix_model::Frame) -> bool {
        self.entries.iter().any(|e| e.spec.role == Role::Idle && !e.spec.busy_time && self.entry_matches(e, frame))
    }

    /// Whether a suspended task, by its await chain (outermost first), is parked: its innermost
    /// frame parks and no frame of the chain is a known cost (a network client waiting for a
    /// reply through an `asyncio.Event` is waiting for the reply, not parked).
    pub fn parks_chain(&self, chain: &[onefix_model::Frame]) -> bool {
        chain.last().is_some_and(|f| self.parks(f))
            && !chain.iter().any(|f| self.entries.iter().any(|e| e.spec.role == Role::Cost && self.entry_matches(e, f)))
    }

    fn entry_matches(&self, e: &Entry, frame: &onefix_model::Frame) -> bool {
        let qualified = crate::names::qualified_name(frame);
        e.matches_frame(frame.kind, &qualified)
            || crate::names::unqualified_name(frame).is_some_and(|u| e.matches_frame(frame.kind, &u))
    }

    /// Loads entries from (file name, TOML text) pairs.
    pub fn load<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<KnowledgeBase, KbError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            entry: Vec<EntrySpec>,
        }
        let mut entries = Vec::new();
        for (name, text) in files {
            let invalid = |detail: String| KbError::Invalid { file: name.to_owned(), detail };
            let file: File = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
            for spec in file.entry {
                if entries.iter().any(|e: &Entry| e.spec.id == spec.id) {
                    return Err(invalid(format!("entry {} is defined twice", spec.id)));
                }
                if spec.frames.is_empty() && spec.calls.is_empty() {
                    return Err(invalid(format!("entry {} has neither frames nor calls", spec.id)));
                }
                let python = spec.languages.iter().any(|l| l == "python");
                let native = spec.languages.iter().any(|l| l == "native");
                if !python && !native {
                    return Err(invalid(format!("entry {} names no known language", spec.id)));
                }
                if let Some(bad) = spec.also_causes.iter().find(|id| **id == spec.id) {
                    return Err(invalid(format!("entry {} names itself in also_causes ({bad})", spec.id)));
                }
                let frames = glob_set(&spec.frames).map_err(|e| invalid(format!("entry {}: {e}", spec.id)))?;
                let calls = glob_set(&spec.calls).map_err(|e| invalid(format!("entry {}: {e}", spec.id)))?;
                let per_item = glob_set(&spec.per_item).map_err(|e| invalid(format!("entry {}: {e}", spec.id)))?;
                entries.push(Entry { spec, python, native, frames, calls, per_item });
            }
        }
        for e in &entries {
            if let Some(missing) = e.spec.also_causes.iter().find(|id| !entries.iter().any(|o| &o.spec.id == *id)) {
                return Err(KbError::Invalid {
                    file: "(all)".into(),
                    detail: format!("entry {} names unknown entry {missing} in also_causes", e.spec.id),
                });
            }
        }
        Ok(KnowledgeBase { entries })
    }
}

fn glob_set(globs: &[String]) -> Result<Option<RegexSet>, regex::Error> {
    if globs.is_empty() {
        return Ok(None);
    }
    let patterns: Vec<String> =
        globs.iter().map(|g| format!("^{}$", g.split('*').map(regex::escape).collect::<Vec<_>>().join(".*"))).collect();
    // Validate each alone first, so an error names the culprit.
    for p in &patterns {
        Regex::new(p)?;
    }
    RegexSet::new(patterns).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_loads_and_every_entry_classifies_its_own_examples() {
        let kb = KnowledgeBase::builtin();
        assert!(kb.entries.len() >= 12, "the issue asks for at least ten kinds of costly operation");
        for entry in &kb.entries {
            assert!(!entry.spec.examples.is_empty(), "{} has no example", entry.spec.id);
            for example in &entry.spec.examples {
                let (native, name) = match example.strip_prefix("native:") {
                    Some(n) => (true, n),
                    None => (false, example.as_str()),
                };
                let hit = match name.strip_prefix("call:") {
                    Some(call) => entry.matches_call(call),
                    None => entry.matches_frame(if native { FrameKind::Native } else { FrameKind::Python }, name),
                };
                assert!(hit, "entry {} does not match its example {example}", entry.spec.id);
            }
        }
    }

    #[test]
    fn native_code_gets_the_fix_in_its_own_words() {
        let kb = KnowledgeBase::builtin();
        let wait = kb.entries.iter().find(|e| e.spec.id == "network-wait").unwrap();
        assert!(wait.spec.fix_for(FrameKind::Python).contains("asyncio.gather"));
        assert!(wait.spec.fix_for(FrameKind::Native).contains("goroutine"));
        let tls = kb.entries.iter().find(|e| e.spec.id == "tls-trust-store").unwrap();
        assert_eq!(tls.spec.fix_for(FrameKind::Native), tls.spec.fix, "one fix for both when no native one is given");
    }

    #[test]
    fn parks_says_which_waits_are_for_want_of_work() {
        let kb = KnowledgeBase::builtin();
        let lib = "/usr/lib/python3.11/asyncio";
        let at = |f: &str, file: &str| onefix_model::Frame::python(f, format!("{lib}/{file}"), 1);
        assert!(kb.parks(&at("get", "queues.py")), "a worker on an empty queue");
        assert!(kb.parks(&at("acquire", "locks.py")), "a task queued on a semaphore");
        assert!(!kb.parks(&at("_wait_for_data", "streams.py")), "a reply being waited for is a cost");
        assert!(!kb.parks(&at("sleep", "tasks.py")));
        let select = onefix_model::Frame::python("select", "/usr/lib/python3.11/selectors.py", 1);
        assert!(!kb.parks(&select), "an event-loop wait counts in the busy time");
        let user = onefix_model::Frame::python("main", "/app/main.py", 9);
        assert!(kb.parks_chain(&[user.clone(), at("Event.wait", "locks.py")]), "waiting for a stop event");
        let client = onefix_model::Frame::python(
            "AsyncHTTP11Connection._receive_event",
            "/venv/lib/python3.11/site-packages/httpcore/_async/http11.py",
            200,
        );
        assert!(
            !kb.parks_chain(&[user, client, at("Event.wait", "locks.py")]),
            "a client waiting for a reply through an event"
        );
    }

    #[test]
    fn rejects_bad_files_with_the_file_named() {
        let bad = [
            ("a.toml", "entry = 3"),
            ("b.toml", "[[entry]]\nid='x'\nkind='k'\nlanguages=['python']\nwhat='w'\nwhy='y'\nfix='f'\nexamples=[]"),
            ("c.toml", "[[entry]]\nid='x'\nkind='k'\nlanguages=['cobol']\nframes=['a']\nwhat='w'\nwhy='y'\nfix='f'\nexamples=[]"),
        ];
        for (name, text) in bad {
            let err = KnowledgeBase::load([(name, text)]).err().expect(name).to_string();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn globs_are_anchored_and_literal_apart_from_stars() {
        let set = glob_set(&["ssl.create_*".into(), "a.b".into()]).unwrap().unwrap();
        assert!(set.is_match("ssl.create_default_context"));
        assert!(!set.is_match("xssl.create_default_context"));
        assert!(set.is_match("a.b"));
        assert!(!set.is_match("aXb"), "a dot is a dot");
    }
}
