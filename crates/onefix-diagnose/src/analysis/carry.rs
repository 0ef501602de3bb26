//! The user's view of a call into a package carries what the package's own view finds: when
//! most of the time under the user's line is one recognised pattern inside the package (a
//! quadratic append or re-scan, a repeated walk), the line is that kind, said with where in
//! the package it is, not "call it less often" for a call the user makes once.

use std::collections::HashMap;
use std::path::PathBuf;

use super::*;
use crate::origin::Exclusion;

/// The package's pattern must be under this fraction of the time under the user's line.
const MOSTLY_ONE_PATTERN: f64 = 0.5;
/// The kinds carried: the package's own algorithm, seen only when its lines are read as code
/// (a quadratic re-scan or append, a walk restarted per call). A knowledge-base cost (a
/// connection, a deep copy, a log record) is matched by its frames in the user's view already,
/// and found inside a package it is as often the caller's doing (a client built per request
/// makes the package connect per request), so the package is not blamed for it.
const CARRIED: [Kind; 2] = [Kind::Quadratic, Kind::RepeatedWalk];

/// For each generic finding (`hot-call`: time in calls the user's code makes), diagnoses the
/// package its evidence leads into as if it were the user's code (the maintainer's view), and
/// takes the kind of that view's finding that holds most of the time under the line.
pub(super) fn carry_library_patterns(
    diagnosis: &mut Diagnosis,
    profile: &Profile,
    kb: &KnowledgeBase,
    user: &UserCode,
    opts: &Options,
) {
    let mut inner_views: HashMap<PathBuf, Option<Diagnosis>> = HashMap::new();
    for finding in diagnosis.findings.iter_mut().filter(|f| f.kind == Kind::HotCall) {
        // The first package the evidence names, heaviest first (the call the line makes).
        let Some((dir, name)) = finding.evidence.iter().find_map(|e| match Exclusion::of_path(&e.file) {
            Some(Exclusion::Package { dir, name }) => Some((PathBuf::from(dir), name)),
            _ => None,
        }) else {
            continue;
        };
        if user.dirs().iter().any(|d| dir.starts_with(d)) {
            continue;
        }
        let inner = inner_views
            .entry(dir.clone())
            .or_insert_with(|| {
                let package = UserCode::new([&dir], user.base());
                let d = Engine::new(profile, kb, &package, opts).run(opts);
                (!d.findings.is_empty()).then_some(d)
            })
            .as_ref();
        let Some(inner) = inner else { continue };
        // The package's findings in order of rank: the first recognised one that holds most of
        // the time under the user's line.
        let under = |f: &Finding| co_weight(profile, opts.mode, (&finding.file, finding.line), (&f.file, f.line));
        let Some((pattern, part)) = inner
            .findings
            .iter()
            .filter(|f| CARRIED.contains(&f.kind))
            .map(|f| (f, under(f)))
            .find(|(_, (outer, both))| *outer > 0 && *both as f64 >= MOSTLY_ONE_PATTERN * *outer as f64)
            .map(|(f, (outer, both))| (f, both as f64 / outer as f64))
        else {
            continue;
        };
        let place = format!("{}:{}", onefix_model::fmt::file_name(&pattern.file), pattern.line);
        let code = pattern.code.as_deref().map(|c| format!(" `{c}`")).unwrap_or_default();
        let what = if pattern.what.is_empty() { pattern.kind.as_str().replace('-', " ") } else { pattern.what.clone() };
        finding.why = format!(
            "{:.0}% of the time under this call is one pattern inside {name}: {what} at {place}{code} ({}); {}",
            part * 100.0,
            pattern.kind.as_str(),
            pattern.why
        );
        finding.advice = format!(
            "the cost is in {name}'s code at {place}, whatever calls it: use a version of {name} that fixes it, or report it upstream with this evidence (the change there: {}); until then {}",
            pattern.advice, finding.advice
        );
        finding.kind = pattern.kind;
        finding.rule = format!("in-package:{}", pattern.rule);
        finding.what = what;
        finding.explained = part;
        let frame = if pattern.file.ends_with(".py") {
            qualified_name(&onefix_model::Frame::python(pattern.function.clone(), pattern.file.clone(), pattern.line))
        } else {
            pattern.function.clone()
        };
        finding.evidence.retain(|e| e.frame != frame);
        finding.evidence.push(Evidence { frame, file: pattern.file.clone(), line: pattern.line, share: part });
        // Heaviest first, as every finding's evidence (stable: the package's line after a call
        // that holds as much).
        finding.evidence.sort_by(|a, b| b.share.total_cmp(&a.share));
        finding.evidence.truncate(MAX_EVIDENCE);
        finding.word_title(time_words(opts.mode));
    }
}

/// The weight of the samples (counted in `mode`) whose stack holds a frame at `outer`, and of
/// those whose stack also holds one at `inner` (file as recorded, line).
fn co_weight(profile: &Profile, mode: Mode, outer: (&str, u32), inner: (&str, u32)) -> (u64, u64) {
    let mut by_stack: HashMap<StackId, (bool, bool)> = HashMap::new();
    let (mut outer_w, mut both_w) = (0u64, 0u64);
    for s in profile.samples.iter().filter(|s| mode.counts(s.state)) {
        let Some(stack) = s.stack else { continue };
        let (has_outer, has_inner) = *by_stack.entry(stack).or_insert_with(|| {
            let mut at = (false, false);
            for f in profile.stack_frames_leaf_first(Some(stack)) {
                let f = profile.frame(f);
                at.0 |= f.line == outer.1 && f.file == outer.0;
                at.1 |= f.line == inner.1 && f.file == inner.0;
            }
            at
        });
        if has_outer {
            outer_w += s.weight as u64;
            if has_inner {
                both_w += s.weight as u64;
            }
        }
    }
    (outer_w, both_w)
}
