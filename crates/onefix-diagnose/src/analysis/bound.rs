//! The bound on the gain: Amdahl's law over a line's share, and the bound of two costs that go
//! away together.

/// Amdahl's bound: what is left if this share went to zero; none for a share of 1.
pub(super) fn speedup(share: f64) -> Option<f64> {
    (share < 1.0).then(|| 1.0 / (1.0 - share))
}

/// The bound when the cost behind bound `a` and the part `b_part` of the cost behind bound `b`
/// both go away: their shares (each `1 - 1/bound`) add. None when either bound is unknown.
pub(super) fn combine(a: Option<f64>, b: Option<f64>, b_part: f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => speedup((1.0 - 1.0 / a) + (1.0 - 1.0 / b) * b_part),
        _ => None,
    }
}

/// The bound of `into` once `other` is folded into it, `part` of `other`'s cost going away
/// with `into`'s: the bounds combine, a reason for no bound is kept, and the longer stretch
/// stands for both.
pub(super) fn join_bounds(into: &mut crate::Finding, other: &crate::Finding, part: f64) {
    into.max_speedup = combine(into.max_speedup, other.max_speedup, part);
    if into.no_bound.is_none() {
        into.no_bound = other.no_bound.clone();
    }
    into.bound_weight = into.bound_weight.max(other.bound_weight);
}

/// Evidence lines kept per finding.
pub(super) const MAX_EVIDENCE: usize = 6;

/// The evidence of two findings that become one: a frame both name is one line, with the two
/// shares added (they are of different samples, charged to different lines).
pub(super) fn join_evidence(into: &mut Vec<crate::Evidence>, more: impl IntoIterator<Item = crate::Evidence>) {
    for e in more {
        match into.iter_mut().find(|x| x.frame == e.frame) {
            Some(x) => x.share += e.share,
            None => into.push(e),
        }
    }
    into.truncate(MAX_EVIDENCE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_and_the_bound_follows() {
        assert_eq!(speedup(0.5), Some(2.0));
        assert_eq!(speedup(1.0), None);
        // 50% and 25% go away together: 75%, a bound of 4x.
        let both = combine(Some(2.0), Some(4.0 / 3.0), 1.0).unwrap();
        assert!((both - 4.0).abs() < 1e-9, "{both}");
        // Only half of the second cost goes: 62.5%.
        let half = combine(Some(2.0), Some(4.0 / 3.0), 0.5).unwrap();
        assert!((half - 1.0 / 0.375).abs() < 1e-9, "{half}");
        assert_eq!(combine(Some(2.0), None, 1.0), None);
    }
}
