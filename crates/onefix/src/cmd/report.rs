use std::fs::File;
use std::io::{BufReader, Read};
use std::process::ExitCode;

use anyhow::{Context, Result};
use onefix_diagnose::Note;
use onefix_import::Imported;
use onefix_model::attachments::{ImportedFrom, IMPORTED};
use onefix_model::recording::{read_recording, MAGIC};

use crate::cli::ReportArgs;
use crate::outputs;

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let path = &args.recording;
    // Checked before the recording is read: a bad path is said at once, and no output may
    // land on the recording itself.
    let planned = outputs::Planned::check(&args.outputs)?;
    let arg = path.to_string_lossy();
    if onefix_import::is_url(&arg) {
        let bytes = onefix_import::fetch(&arg)?;
        let imported = onefix_import::import(&bytes).with_context(|| format!("cannot read the profile from {arg}"))?;
        return report_imported(imported, &arg, &args, planned);
    }
    crate::output::check_distinct(&planned.all(), &[path.as_path()])?;
    let mut file = File::open(path).with_context(|| format!("cannot open the recording {}", path.display()))?;
    // onefix's own recordings are read as a stream; any other profile is read whole and told
    // by its content.
    let mut head = Vec::with_capacity(MAGIC.len());
    (&mut file)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if head.as_slice() != MAGIC.as_slice() {
        let bytes = read_profile(file, head, path)?;
        let imported = onefix_import::import(&bytes).with_context(|| format!("cannot read {}", path.display()))?;
        return report_imported(imported, &arg, &args, planned);
    }
    let loaded = read_recording(BufReader::new(std::io::Cursor::new(head).chain(file)))
        .with_context(|| format!("cannot read {}", path.display()))?;
    if !loaded.complete {
        crate::messages::say(format_args!(
            "{} ends early (the profiler was stopped before it finished writing); reporting the {} samples it holds",
            path.display(),
            loaded.profile.sample_count()
        ));
    }
    let mut profile = loaded.profile;
    if profile.meta.weight_unit == onefix_model::WeightUnit::Bytes {
        let info = profile.memory_info().or_else(|| crate::memory_report::read_info(path));
        let diagnosis = crate::memory_report::report(
            &profile,
            info.as_ref(),
            args.memory_view.memory_view,
            &args.outputs,
            planned,
            loaded.complete,
        )?;
        return Ok(gate_exit(&diagnosis, &args));
    }
    let mode = args.mode.map(Into::into).unwrap_or(profile.meta.mode);
    // The header and the JSON's `mode` say how the samples are weighed in this report, which
    // `--mode` may change from how they were recorded.
    profile.meta.mode = mode;
    // A report of a package that did not run would be some other code's: said, and no report.
    if outputs::warn_unmatched_packages(&profile, &args.outputs) {
        return Ok(ExitCode::from(crate::messages::NOTHING_RECORDED));
    }
    outputs::settle_running(&mut profile, &args.outputs);
    let diagnosis = outputs::run_diagnosis(&profile, mode, &args.outputs);
    outputs::write_all(&profile, &diagnosis, mode, planned, loaded.complete)?;
    Ok(gate_exit(&diagnosis, &args))
}

/// A profile that is not a recording, read whole: at most [`onefix_import::MAX_PROFILE_BYTES`].
/// A larger regular file is refused before any of it is read; a special file (a pipe,
/// `/dev/zero`) is read up to the bound.
fn read_profile(mut file: File, head: Vec<u8>, path: &std::path::Path) -> Result<Vec<u8>> {
    let limit = onefix_import::MAX_PROFILE_BYTES;
    let too_large = |what: String| {
        anyhow::anyhow!(
            "{} {what}, more than the {} MiB onefix reads of a profile (its own recordings are read as a stream, of any size)",
            path.display(),
            limit >> 20
        )
    };
    let meta = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_large(format!("is {}", onefix_model::fmt::bytes(meta.len()))));
    }
    let rest = onefix_import::read_at_most(&mut file, limit - head.len() as u64)
        .with_context(|| format!("cannot read {}", path.display()))?
        .ok_or_else(|| too_large("goes on".to_owned()))?;
    Ok([head, rest].concat())
}

/// Status 3 when a finding meets a `--fail-on` condition (said), else success.
fn gate_exit(diagnosis: &onefix_diagnose::Diagnosis, args: &ReportArgs) -> ExitCode {
    if outputs::fail_on_met(diagnosis, &args.outputs) {
        ExitCode::from(crate::messages::GATE_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// A profile recorded by another tool: its relative source files are looked for in the current
/// directory, its user code guessed unless `--user-code` says, and what its format lacks is
/// told to the diagnosis and said in the report's first note.
fn report_imported(
    mut imported: Imported,
    source: &str,
    args: &ReportArgs,
    planned: outputs::Planned,
) -> Result<ExitCode> {
    let cwd = std::env::current_dir().ok();
    let from = ImportedFrom { format: imported.format.name().to_owned(), source: source.to_owned() };
    let profile = &mut imported.profile;
    profile.attach(IMPORTED, &from);
    if let Some(dir) = cwd.as_deref() {
        onefix_import::resolve_sources(profile, dir);
    }
    profile.meta.user_code = onefix_import::guess_user_code(profile, cwd.as_deref());
    // No base for relative names: one not found here (py-spy's `threading.py`) is not the user's.
    profile.meta.target.cwd = None;
    let mode = args.mode.map(Into::into).unwrap_or(profile.meta.mode);
    profile.meta.mode = mode;
    let lacks = imported.lacks;
    let profile = &imported.profile;
    let mut diagnosis = outputs::diagnose_with(profile, mode, &args.outputs, |o| {
        o.timeline = !lacks.timeline;
        o.partial_stacks = false;
    });
    if let Some(note) = imported.note() {
        diagnosis.notes.insert(0, Note::Said(note));
    }
    outputs::write_all(profile, &diagnosis, mode, planned, true)?;
    Ok(ExitCode::SUCCESS)
}
