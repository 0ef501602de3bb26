//! The edges of a wait on another thread. A Python thread read at the user line that calls the
//! wait (`item = q.get()`, `total += future.result()`), with no frame of the wait beneath it, is
//! going into the wait or coming back out of it: the condition's bookkeeping, and taking the GIL
//! back once woken. Where the wait blocks every time (a consumer fed by a slow producer), those
//! edges hold the GIL for as long as the consumer's own work: in one recording of a queue fed
//! by a slow producer, the consumer's `q.get()` line held the GIL 0.31 s with no frame beneath
//! it, its work 0.18 s; once the producer was fast the wait returned at once (0.01 s in all).
//! Such reads are the wait's, parked as it is: not work of the line that a fix must keep, and
//! a thread queuing for the GIL behind them waits for the wait, not for the line's work.
//!
//! A read is taken for an edge only when the line calls one name, and the same line was read
//! elsewhere in the recording inside a call of that name that waits for another thread (the
//! knowledge base's `woken_by_thread` parking entries): a line that also calls something else
//! (`json.loads(q.get())`) may be doing that.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::names::written_name;

impl Engine<'_> {
    /// Marks the stacks that are the edges of a wait (see the module's comment) parked at the
    /// wait's entry. Runs before anything reads the stacks' facts for the diagnosis.
    pub(super) fn settle_wait_edges(&mut self) {
        let profile = self.profile;
        let mut stacks: Vec<StackId> = profile.samples.iter().filter_map(|s| s.stack).collect();
        stacks.sort_unstable();
        stacks.dedup();
        // (the user line's frame, the name of the call it waits in) -> the parking entry.
        let mut waits_in: HashMap<(FrameId, String), u16> = HashMap::new();
        let mut bare: Vec<(usize, FrameId)> = Vec::new();
        for &stack in &stacks {
            let Some(i) = self.stack(Some(stack)) else { continue };
            let facts = &self.stack_facts[i];
            let Some(line) = facts.line else { continue };
            let frame = self.lines[line].frame;
            if profile.frame(frame).kind != FrameKind::Python {
                continue;
            }
            match (facts.idle, facts.beneath.last()) {
                (Some(e), Some(&called)) if self.kb.entries[e as usize].spec.woken_by_thread => {
                    let callee = profile.frame(called);
                    if let Some(name) =
                        (callee.kind == FrameKind::Python).then(|| written_name(&callee.function)).flatten()
                    {
                        waits_in.insert((frame, name.to_owned()), e);
                    }
                }
                (None, None) => bare.push((i, frame)),
                _ => {}
            }
        }
        if waits_in.is_empty() {
            return;
        }
        let mut sole_call: HashMap<FrameId, Option<String>> = HashMap::new();
        for (i, frame) in bare {
            let name = match sole_call.get(&frame) {
                Some(known) => known.clone(),
                None => {
                    let name = self.sole_call(frame);
                    sole_call.insert(frame, name.clone());
                    name
                }
            };
            if let Some(&e) = name.and_then(|n| waits_in.get(&(frame, n))) {
                self.stack_facts[i].idle = Some(e);
            }
        }
    }

    /// The one name the line of `frame` calls, if it calls exactly one (`items.get()` calls
    /// `get`; `json.loads(q.get())` calls two).
    fn sole_call(&mut self, frame: FrameId) -> Option<String> {
        let f = self.profile.frame(frame);
        let path = self.user.resolve(&f.file)?;
        let code = self.source.line(&path, f.line)?;
        let names: HashSet<String> =
            called_names(&code).iter().map(|n| n.rsplit('.').next().unwrap_or(n).to_owned()).collect();
        (names.len() == 1).then(|| names.into_iter().next()).flatten()
    }
}
