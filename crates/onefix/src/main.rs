//! onefix: names the one line that makes a program slow, says why, and proposes the fix.

mod cli;
mod cmd;
mod memory_report;
mod messages;
mod output;
mod outputs;
mod progress;
mod target;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of stdout goes away (`onefix ... | head`)
    // instead of panicking on the failed print. Output is written after the target is stopped
    // and the recording saved, so nothing is lost.
    // SAFETY: setting a signal's disposition to its default before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = cli::Cli::parse();
    let result = match cli.command {
        // Tracking memory is its own run: the agent is preloaded, no sampler reads stacks.
        cli::Command::Record(args) if args.memory => cmd::memory::run(args),
        cli::Command::Record(args) => cmd::record::run(args),
        cli::Command::Report(args) => cmd::report::run(args),
        cli::Command::Load(args) => cmd::load::run(args),
        cli::Command::Compare(args) => cmd::compare::run(args),
        cli::Command::Top(args) => cmd::top::run(args),
        cli::Command::Dump(args) => cmd::dump::run(args),
        cli::Command::Generate(args) => cmd::generate::run(args),
        cli::Command::Janitor(args) => cmd::janitor::run(args),
        cli::Command::Agent(args) => cmd::agent::run(args),
        cli::Command::Fleet(command) => cmd::fleet::run(command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::messages::say(messages::one_sentence(&e));
            ExitCode::from(messages::NOTHING_RECORDED)
        }
    }
}
