//! `onefix compare A B`: is B faster than A?

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use onefix_load::compare;
use onefix_load::LoadResult;

use crate::cli::CompareArgs;

fn read_result(path: &Path) -> Result<LoadResult> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if text.starts_with(b"ONEFIX") || path.extension().is_some_and(|e| e == "onefix") {
        bail!(
            "{} is a recording; compare takes two load results written by `onefix load --json` (comparing recordings is not supported yet)",
            path.display()
        );
    }
    let value: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not a load result (not JSON)", path.display()))?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(onefix_load::stats::FORMAT) => {}
        Some(other) => bail!("{} is a `{other}` file, not a load result this onefix reads", path.display()),
        None => bail!("{} is not a load result written by `onefix load --json`", path.display()),
    }
    serde_json::from_value(value).with_context(|| format!("{} is a damaged load result", path.display()))
}

pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let a = read_result(&args.a)?;
    let b = read_result(&args.b)?;
    let c = compare::compare(&a, &b);
    let name = |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
    print!("{}", compare::render(&c, &a, &b, &name(&args.a), &name(&args.b)));
    if let Some(path) = &args.json {
        let file = std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        serde_json::to_writer_pretty(&mut w, &c)?;
        writeln!(w)?;
        w.flush().with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
