//! What onefix says to people on stderr, and the exit statuses scripts read: one place for both.

use std::fmt::Display;

/// A recording was made but did not end as asked: the target crashed or failed before its own
/// code ran, or the recording or an output could not be written whole (disk full).
pub const RECORDED_BUT_INCOMPLETE: u8 = 1;
/// Nothing was recorded: bad input, a refused output, a target that could not be read. The
/// sentence saying why is the error's.
pub const NOTHING_RECORDED: u8 = 2;
/// A CI gate failed, everything else having gone as asked: `--fail-on` met by a finding, or
/// `compare --fail-if-slower` found B slower beyond the limit.
pub const GATE_FAILED: u8 = 3;

/// An error as one sentence: the outermost message, then each cause that says something new
/// (an io error is often both the message's tail and its cause: said once).
pub fn one_sentence(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !msg.contains(&cause) {
            msg.push_str(": ");
            msg.push_str(&cause);
        }
    }
    msg
}

/// One line on stderr, prefixed with onefix's name so that it stands apart from the target's
/// own output.
/// A sentence may quote the target (its command line, a path, a name): its control characters
/// are shown escaped, so that no byte of the target's can retitle or rewrite the terminal.
pub fn say(message: impl Display) {
    eprintln!("onefix: {}", onefix_model::fmt::escape_controls(&message.to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let io = std::io::Error::from_raw_os_error(21);
        let e = anyhow::Error::new(io)
            .context(format!("cannot write the man page x.1: {}", std::io::Error::from_raw_os_error(21)));
        assert_eq!(one_sentence(&e), "cannot write the man page x.1: Is a directory (os error 21)");
        let e = anyhow::anyhow!("disk full").context("cannot write the recording");
        assert_eq!(one_sentence(&e), "cannot write the recording: disk full");
    }
}
