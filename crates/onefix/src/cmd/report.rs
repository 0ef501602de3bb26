use std::fs::File;
use std::io::BufReader;
use std::process::ExitCode;

use anyhow::{Context, Result};
use onefix_model::recording::read_recording;

use crate::cli::ReportArgs;
use crate::outputs;

pub fn run(args: ReportArgs) -> Result<ExitCode> {
    let path = &args.recording;
    // Checked before the recording is read: a bad path is said at once, and no output may
    // land on the recording itself.
    let planned = outputs::Planned::check(&args.outputs)?;
    crate::output::check_distinct(&planned.all(), &[path.as_path()])?;
    let file = File::open(path).with_context(|| format!("cannot open the recording {}", path.display()))?;
    let loaded = read_recording(BufReader::new(file)).with_context(|| format!("cannot read {}", path.display()))?;
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
    outputs::settle_running(&mut profile, &args.outputs);
    let diagnosis = outputs::run_diagnosis(&profile, mode, &args.outputs);
    outputs::write_all(&profile, &diagnosis, mode, planned, loaded.complete)?;
    Ok(gate_exit(&diagnosis, &args))
}

/// Status 3 when a finding meets a `--fail-on` condition (said), else success.
fn gate_exit(diagnosis: &onefix_diagnose::Diagnosis, args: &ReportArgs) -> ExitCode {
    if outputs::fail_on_met(diagnosis, &args.outputs) {
        ExitCode::from(crate::messages::GATE_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}
