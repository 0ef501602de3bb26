//! `onefix generate` (hidden): shell completions and man pages for packagers, generated from
//! the command-line definition in cli.rs so they never drift from it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::{self, Generate, GenerateArgs};

pub fn run(args: GenerateArgs) -> Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.what {
        Generate::Completions { shell } => cli::write_completions(shell, &mut out),
        Generate::Man { dir: None } => cli::write_man(&mut out).context("could not write the man page")?,
        Generate::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            // Each page written whole beside its name and renamed into place.
            for (name, page) in cli::man_pages().context("could not render the man pages")? {
                let path = dir.join(&name);
                crate::output::check(&path, "man page", false)?
                    .write_with(|w| w.write_all(&page))
                    .with_context(|| format!("cannot write the man page {}", path.display()))?;
            }
        }
    }
    out.flush().context("could not write to stdout")?;
    Ok(ExitCode::SUCCESS)
}
