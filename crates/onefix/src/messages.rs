//! What onefix says to people on stderr, and the exit statuses scripts read: one place for both.

use std::fmt::Display;

/// A recording was made but did not end as asked: the target crashed or failed before its own
/// code ran, or the recording or an output could not be written whole (disk full).
pub const RECORDED_BUT_INCOMPLETE: u8 = 1;
/// Nothing was recorded: bad input, a refused output, a target that could not be read. The
/// sentence saying why is the error's.
pub const NOTHING_RECORDED: u8 = 2;

/// One line on stderr, prefixed with onefix's name so that it stands apart from the target's
/// own output.
pub fn say(message: impl Display) {
    eprintln!("onefix: {message}");
}
