//! The frontier of a stack: its deepest frame in the user's code, where a sample's cost is
//! charged. The time, memory and live-progress views all split stacks here, one way.

use onefix_model::FrameId;

/// User frames above the frontier kept as its callers: where a loop that repeats it, or the
/// line that stores what it returned, is looked for.
pub const CALLERS_KEPT: usize = 3;

/// A stack split at its frontier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frontier {
    /// The deepest user frame.
    pub frame: FrameId,
    /// Its position in the stack, leaf first.
    pub depth: usize,
    /// The frames beneath it (what it calls), leaf first.
    pub beneath: Vec<FrameId>,
    /// The user frames above it, nearest first, at most [`CALLERS_KEPT`].
    pub callers: Vec<FrameId>,
}

impl Frontier {
    /// Splits a stack given leaf first; `is_user` says whether a frame is the user's code.
    /// `None` when no frame is.
    pub fn of(leaf_first: &[FrameId], mut is_user: impl FnMut(FrameId) -> bool) -> Option<Frontier> {
        let depth = leaf_first.iter().position(|&f| is_user(f))?;
        let callers = leaf_first[depth + 1..].iter().copied().filter(|&f| is_user(f)).take(CALLERS_KEPT).collect();
        Some(Frontier { frame: leaf_first[depth], depth, beneath: leaf_first[..depth].to_vec(), callers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_splits_at_its_deepest_user_frame() {
        // Leaf first: two library frames, the user's line, a library frame, four user callers.
        let stack = [10, 11, 1, 12, 2, 3, 4, 5];
        let f = Frontier::of(&stack, |f| f < 10).unwrap();
        assert_eq!((f.frame, f.depth), (1, 2));
        assert_eq!(f.beneath, vec![10, 11]);
        assert_eq!(f.callers, vec![2, 3, 4]);
        assert_eq!(Frontier::of(&[10, 11], |f| f < 10), None);
    }
}
