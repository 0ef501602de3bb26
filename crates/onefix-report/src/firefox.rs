//! The Firefox Profiler's processed profile format (<https://profiler.firefox.com>), written
//! with `fxprof-processed-profile`, the crate samply writes with.
//!
//! - One process per pid and one thread per thread, with their names; each sample keeps its
//!   time, its weight (sampling intervals, or bytes for a memory recording) and, for time
//!   recordings, the CPU time the thread spent since its previous sample (`threadCPUDelta`), so
//!   the profiler's CPU graph and its wall-time call tree both hold.
//! - The thread's state at the sample is the category of the sample's frames (running, running
//!   with the GIL, waiting on a lock or the GIL, waiting while holding the GIL, waiting), and
//!   the frame's kind (Python, native, kernel) is the subcategory: the activity graph is
//!   coloured by what the thread was doing.
//! - Frames are labels: `function (file.py:line)` for Python and native frames with debug
//!   information, with `[library]` added for native frames (the format's own file and line
//!   columns are not written by the crate).
//! - Each finding is a marker type "onefix finding": one interval marker per stretch of a
//!   thread's consecutive samples whose stack passes the finding's line, so the marker chart
//!   shows when and on which thread the line was running, with its kind, share and fix.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufWriter, Write};

use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CategoryPairHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo,
    MarkerFieldFlags, MarkerFieldFormat, MarkerTiming, ProcessHandle, Profile as FxProfile, ReferenceTimestamp,
    SamplingInterval, StackHandle, StaticSchemaMarker, StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp,
    WeightType,
};
use onefix_diagnose::Diagnosis;
use onefix_model::{Frame, FrameKind, Mode, Profile, Sample, StackId, ThreadState, WeightUnit};

use crate::describe;

/// Findings marked per thread, at most: a bit each in a stack's mask.
const MARKED_FINDINGS: usize = 64;
/// Markers per finding and thread, at most: a line that comes and goes all run long is still
/// seen in the first ones, and the file stays small.
const MARKERS_PER_THREAD: usize = 2000;

/// The thread states the samples are coloured by, as categories.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum StateCategory {
    Running,
    RunningWithGil,
    WaitingOnLock,
    WaitingWithGil,
    Waiting,
    Allocated,
    Freed,
}

impl StateCategory {
    const ALL: [StateCategory; 7] = [
        StateCategory::Running,
        StateCategory::RunningWithGil,
        StateCategory::WaitingOnLock,
        StateCategory::WaitingWithGil,
        StateCategory::Waiting,
        StateCategory::Allocated,
        StateCategory::Freed,
    ];

    fn of(state: ThreadState, bytes: bool) -> StateCategory {
        match (bytes, state.freed(), state.active(), state.gil(), state.futex()) {
            (true, true, ..) => StateCategory::Freed,
            (true, false, ..) => StateCategory::Allocated,
            (false, _, true, true, _) => StateCategory::RunningWithGil,
            (false, _, true, false, _) => StateCategory::Running,
            (false, _, false, true, _) => StateCategory::WaitingWithGil,
            (false, _, false, false, true) => StateCategory::WaitingOnLock,
            (false, _, false, false, false) => StateCategory::Waiting,
        }
    }

    fn name_and_colour(self) -> (&'static str, CategoryColor) {
        match self {
            StateCategory::Running => ("Running", CategoryColor::Blue),
            StateCategory::RunningWithGil => ("Running, holding the GIL", CategoryColor::Yellow),
            StateCategory::WaitingOnLock => ("Waiting on a lock or the GIL", CategoryColor::Orange),
            StateCategory::WaitingWithGil => ("Waiting, holding the GIL", CategoryColor::Red),
            StateCategory::Waiting => ("Waiting (I/O, sleep, idle)", CategoryColor::Gray),
            StateCategory::Allocated => ("Allocated", CategoryColor::Purple),
            StateCategory::Freed => ("Freed", CategoryColor::LightGreen),
        }
    }
}

/// Each state's category, with one subcategory per frame kind.
struct Categories {
    pairs: HashMap<(StateCategory, FrameKind), CategoryPairHandle>,
    findings: CategoryHandle,
}

impl Categories {
    fn add(fx: &mut FxProfile) -> Categories {
        let mut pairs = HashMap::new();
        for state in StateCategory::ALL {
            let (name, colour) = state.name_and_colour();
            let category = fx.add_category(name, colour);
            for (kind, sub) in
                [(FrameKind::Python, "Python"), (FrameKind::Native, "Native"), (FrameKind::Kernel, "Kernel")]
            {
                pairs.insert((state, kind), fx.add_subcategory(category, sub));
            }
        }
        let findings = fx.add_category("onefix findings", CategoryColor::Magenta);
        Categories { pairs, findings }
    }
}

/// A stretch of a thread's samples whose stacks pass a finding's line.
#[derive(Clone, Debug)]
struct FindingMarker {
    name: StringHandle,
    category: CategoryHandle,
    kind: StringHandle,
    location: StringHandle,
    title: StringHandle,
    fix: StringHandle,
    share: f64,
}

impl StaticSchemaMarker for FindingMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "onefix-finding";
    const DESCRIPTION: Option<&'static str> =
        Some("A finding of onefix: the thread's samples in this stretch pass through the finding's line.");
    const CHART_LABEL: Option<&'static str> = Some("{marker.data.kind} {marker.data.location}");
    const TOOLTIP_LABEL: Option<&'static str> = Some("{marker.name}: {marker.data.title}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name}: {marker.data.title}. Fix: {marker.data.fix}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[
        StaticSchemaMarkerField {
            key: "kind",
            label: "Kind",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "location",
            label: "Line",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "title",
            label: "What",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::SEARCHABLE,
        },
        StaticSchemaMarkerField {
            key: "fix",
            label: "Fix",
            format: MarkerFieldFormat::String,
            flags: MarkerFieldFlags::empty(),
        },
        StaticSchemaMarkerField {
            key: "share",
            label: "Share of the run",
            format: MarkerFieldFormat::Percentage,
            flags: MarkerFieldFlags::empty(),
        },
    ];

    fn name(&self, _profile: &mut FxProfile) -> StringHandle {
        self.name
    }

    fn category(&self, _profile: &mut FxProfile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, field_index: u32) -> StringHandle {
        match field_index {
            0 => self.kind,
            1 => self.location,
            2 => self.title,
            _ => self.fix,
        }
    }

    fn number_field_value(&self, _field_index: u32) -> f64 {
        self.share
    }
}

/// How a frame reads in the profiler: its function, where in the source, and its library.
fn frame_label(frame: &Frame) -> String {
    let mut label = frame.function.clone();
    if !frame.file.is_empty() {
        label.push_str(&format!(" ({}:{})", onefix_model::fmt::file_name(&frame.file), frame.line));
    }
    match frame.kind {
        FrameKind::Native if !frame.module.is_empty() => {
            label.push_str(&format!(" [{}]", onefix_model::fmt::file_name(&frame.module)));
        }
        FrameKind::Kernel => label.push_str(" [kernel]"),
        _ => {}
    }
    label
}

/// Writes the samples that count in `mode`, and the findings as markers, in the Firefox
/// Profiler's processed format.
pub fn write_firefox<W: Write>(w: W, profile: &Profile, diagnosis: &Diagnosis, mode: Mode) -> io::Result<()> {
    let bytes = profile.meta.weight_unit == WeightUnit::Bytes;
    let interval_us = match profile.meta.weight_unit {
        WeightUnit::Samples { interval_us } => interval_us.max(1),
        WeightUnit::Bytes => 1000,
    };
    let product =
        format!("onefix {}: {}", describe::tool_version(&profile.meta), describe::command_line(&profile.meta.target));
    let mut fx = FxProfile::new(
        &product,
        ReferenceTimestamp::from_millis_since_unix_epoch(profile.meta.start_unix_ms as f64),
        SamplingInterval::from_nanos(interval_us * 1000),
    );
    fx.set_os_name("Linux");
    // Every frame is a label already named: nothing for the profiler to look up.
    fx.set_symbolicated(true);
    let categories = Categories::add(&mut fx);

    // Which findings' lines each stack passes through, as a bit per finding.
    let marked: Vec<_> = diagnosis.findings.iter().take(MARKED_FINDINGS).collect();
    let passes = finding_masks(profile, &marked);

    let mut by_thread: Vec<Vec<&Sample>> = vec![Vec::new(); profile.threads().len()];
    for sample in profile.samples.iter().filter(|s| bytes || mode.counts(s.state)) {
        by_thread[sample.thread as usize].push(sample);
    }
    let main_name =
        profile.meta.target.argv.as_ref().and_then(|a| a.first()).map(|a| onefix_model::fmt::file_name(a).to_owned());
    let mut processes: BTreeMap<u32, ProcessHandle> = BTreeMap::new();
    let mut labels: Vec<Option<StringHandle>> = vec![None; profile.frames().len()];
    let mut busiest: Option<(u64, ThreadHandle)> = None;
    let marker_texts: Vec<[StringHandle; 5]> = marked
        .iter()
        .map(|f| {
            let location = format!("{}:{}", onefix_model::fmt::file_name(&f.file), f.line);
            [
                fx.intern_string(&format!("#{} {} at {location}", f.rank, f.kind)),
                fx.intern_string(f.kind.as_str()),
                fx.intern_string(&format!("{}:{}", f.file, f.line)),
                fx.intern_string(&f.title),
                fx.intern_string(&f.advice),
            ]
        })
        .collect();

    for (thread_id, mut samples) in by_thread.into_iter().enumerate() {
        if samples.is_empty() {
            continue;
        }
        samples.sort_by_key(|s| s.time_us); // stable: equal times keep recording order
        let info = &profile.threads()[thread_id];
        let process = *processes.entry(info.pid).or_insert_with(|| {
            let name = match (&main_name, info.pid == profile.meta.target.pid) {
                (Some(name), true) => name.clone(),
                _ => format!("pid {}", info.pid),
            };
            fx.add_process(&name, info.pid, Timestamp::from_nanos_since_reference(0))
        });
        let start = Timestamp::from_nanos_since_reference(samples[0].time_us * 1000);
        // Virtual threads (asyncio tasks, waiting goroutines) have ids above 32 bits; the
        // crate makes clashing ids unique.
        let thread = fx.add_thread(process, info.tid as u32, start, info.tid == u64::from(info.pid));
        let name = match &info.name {
            Some(name) => format!("{name} (tid {})", info.tid),
            None => format!("thread {}", info.tid),
        };
        fx.set_thread_name(thread, &name);
        if bytes {
            fx.set_thread_samples_weight_type(thread, WeightType::Bytes);
        }

        let mut stacks: HashMap<(Option<StackId>, StateCategory), Option<StackHandle>> = HashMap::new();
        let mut previous_us: Option<u64> = None;
        let mut total = 0u64;
        // Per finding: the stretch being marked, and the markers made.
        let mut open: Vec<Option<(u64, u64)>> = vec![None; marked.len()];
        let mut made = vec![0usize; marked.len()];
        for (i, sample) in samples.iter().enumerate() {
            let state = StateCategory::of(sample.state, bytes);
            let stack = match stacks.get(&(sample.stack, state)) {
                Some(&s) => s,
                None => {
                    let s = fx_stack(&mut fx, thread, profile, sample.stack, state, &categories, &mut labels);
                    stacks.insert((sample.stack, state), s);
                    s
                }
            };
            // A merged sample stands for `weight` ticks from its time on: it is placed at its
            // last tick, so that the CPU time it carries falls after the previous sample.
            let next_us = samples.get(i + 1).map(|s| s.time_us);
            let (at_us, cpu_us) = if bytes {
                (sample.time_us.max(previous_us.unwrap_or(0)), 0)
            } else {
                let span = u64::from(sample.weight.max(1)) * interval_us;
                let last_tick = sample.time_us + span - interval_us;
                let at = last_tick.min(next_us.unwrap_or(u64::MAX)).max(sample.time_us).max(previous_us.unwrap_or(0));
                let since = previous_us.map_or(span, |p| at - p);
                (at, if sample.state.active() { span.min(since) } else { 0 })
            };
            previous_us = Some(at_us);
            total += u64::from(sample.weight);
            let weight = i32::try_from(sample.weight).unwrap_or(i32::MAX);
            fx.add_sample(
                thread,
                Timestamp::from_nanos_since_reference(at_us * 1000),
                stack,
                CpuDelta::from_micros(cpu_us),
                weight,
            );

            let mask = sample.stack.map_or(0, |s| passes[s as usize]);
            let end_us = at_us + if bytes { 1 } else { interval_us };
            for (f, stretch) in open.iter_mut().enumerate() {
                if mask & (1 << f) != 0 {
                    match stretch {
                        Some((_, end)) => *end = end_us,
                        None => *stretch = Some((sample.time_us, end_us)),
                    }
                } else if let Some((from, to)) = stretch.take() {
                    if made[f] < MARKERS_PER_THREAD {
                        add_marker(&mut fx, thread, &categories, marked[f], &marker_texts[f], from, to);
                        made[f] += 1;
                    }
                }
            }
        }
        for (f, stretch) in open.into_iter().enumerate() {
            if let (Some((from, to)), true) = (stretch, made[f] < MARKERS_PER_THREAD) {
                add_marker(&mut fx, thread, &categories, marked[f], &marker_texts[f], from, to);
            }
        }
        if let Some(last) = previous_us {
            fx.set_thread_end_time(thread, Timestamp::from_nanos_since_reference((last + interval_us) * 1000));
        }
        if !marked.is_empty() {
            fx.set_thread_show_markers_in_timeline(thread, true);
        }
        // Not is_none_or: the workspace promises Rust 1.80.
        #[allow(clippy::unnecessary_map_or)]
        let busier = busiest.map_or(true, |(most, _)| total > most);
        if busier {
            busiest = Some((total, thread));
        }
    }
    if let Some((_, thread)) = busiest {
        fx.add_initial_selected_thread(thread);
    }

    let mut out = BufWriter::new(w);
    serde_json::to_writer(&mut out, &fx)?;
    out.write_all(b"\n")?;
    out.flush()
}

fn add_marker(
    fx: &mut FxProfile,
    thread: ThreadHandle,
    categories: &Categories,
    finding: &onefix_diagnose::Finding,
    texts: &[StringHandle; 5],
    from_us: u64,
    to_us: u64,
) {
    let marker = FindingMarker {
        name: texts[0],
        category: categories.findings,
        kind: texts[1],
        location: texts[2],
        title: texts[3],
        fix: texts[4],
        share: finding.share,
    };
    let timing = MarkerTiming::Interval(
        Timestamp::from_nanos_since_reference(from_us * 1000),
        Timestamp::from_nanos_since_reference(to_us * 1000),
    );
    fx.add_marker(thread, timing, marker);
}

/// For every stack of the profile, the findings (by index, as bits) whose line it passes.
fn finding_masks(profile: &Profile, findings: &[&onefix_diagnose::Finding]) -> Vec<u64> {
    let frame_mask: Vec<u64> = profile
        .frames()
        .iter()
        .map(|frame| {
            findings
                .iter()
                .enumerate()
                .filter(|(_, f)| f.line == frame.line && f.file == frame.file)
                .fold(0u64, |mask, (i, _)| mask | 1 << i)
        })
        .collect();
    // A stack's parent comes before it in the prefix tree.
    let mut masks = vec![0u64; profile.stack_count()];
    for stack in 0..profile.stack_count() {
        let id = stack as StackId;
        let inherited = profile.stack_parent(id).map_or(0, |p| masks[p as usize]);
        masks[stack] = inherited | frame_mask[profile.stack_frame(id) as usize];
    }
    masks
}

/// The profiler's stack for a recording's stack, its frames in the sample's state's category.
fn fx_stack(
    fx: &mut FxProfile,
    thread: ThreadHandle,
    profile: &Profile,
    stack: Option<StackId>,
    state: StateCategory,
    categories: &Categories,
    labels: &mut [Option<StringHandle>],
) -> Option<StackHandle> {
    let frames = profile.stack_frames_root_first(stack);
    let infos: Vec<FrameInfo> = frames
        .into_iter()
        .map(|id| {
            let frame = profile.frame(id);
            let label = *labels[id as usize].get_or_insert_with(|| fx.intern_string(&frame_label(frame)));
            FrameInfo {
                frame: FxFrame::Label(label),
                category_pair: categories.pairs[&(state, frame.kind)],
                flags: FrameFlags::empty(),
            }
        })
        .collect();
    fx.intern_stack_frames(thread, infos.into_iter())
}
