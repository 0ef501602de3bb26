use std::collections::HashMap;

use crate::profile::{FrameId, Profile, Sample, StackId};

pub type NodeId = usize;

/// A call tree aggregated from samples: the view every writer reads (flame graphs, folded
/// stacks, pprof, terminal tables). Children are kept in first-seen order; writers sort as
/// their format wants.
#[derive(Clone, Debug)]
pub struct CallTree {
    pub nodes: Vec<CallTreeNode>,
}

#[derive(Clone, Debug)]
pub struct CallTreeNode {
    /// `None` for the root.
    pub frame: Option<FrameId>,
    pub parent: Option<NodeId>,
    pub children: Vec<NodeId>,
    /// Weight of the samples whose stack passes through this node.
    pub total: u64,
    /// Weight of the samples whose stack ends at this node.
    pub self_weight: u64,
}

impl CallTree {
    pub const ROOT: NodeId = 0;

    /// Builds the tree from the samples `keep` accepts.
    pub fn build(profile: &Profile, mut keep: impl FnMut(&Sample) -> bool) -> CallTree {
        // Aggregate by stack first: far fewer distinct stacks than samples.
        let mut by_stack: HashMap<Option<StackId>, u64> = HashMap::new();
        for s in profile.samples.iter().filter(|s| keep(s)) {
            *by_stack.entry(s.stack).or_default() += s.weight as u64;
        }
        let mut stacks: Vec<(Option<StackId>, u64)> = by_stack.into_iter().collect();
        stacks.sort_unstable_by_key(|(s, _)| s.map(|x| x as i64).unwrap_or(-1));

        let mut tree = CallTree {
            nodes: vec![CallTreeNode { frame: None, parent: None, children: Vec::new(), total: 0, self_weight: 0 }],
        };
        let mut child_index: HashMap<(NodeId, FrameId), NodeId> = HashMap::new();
        for (stack, weight) in stacks {
            let mut node = Self::ROOT;
            tree.nodes[node].total += weight;
            for frame in profile.stack_frames_root_first(stack) {
                node = match child_index.get(&(node, frame)) {
                    Some(&n) => n,
                    None => {
                        let n = tree.nodes.len();
                        tree.nodes.push(CallTreeNode {
                            frame: Some(frame),
                            parent: Some(node),
                            children: Vec::new(),
                            total: 0,
                            self_weight: 0,
                        });
                        tree.nodes[node].children.push(n);
                        child_index.insert((node, frame), n);
                        n
                    }
                };
                tree.nodes[node].total += weight;
            }
            tree.nodes[node].self_weight += weight;
        }
        tree
    }

    pub fn root(&self) -> &CallTreeNode {
        &self.nodes[Self::ROOT]
    }

    /// Frames from the root to `node`.
    pub fn path(&self, mut node: NodeId) -> Vec<FrameId> {
        let mut path = Vec::new();
        while let Some(frame) = self.nodes[node].frame {
            path.push(frame);
            node = self.nodes[node].parent.unwrap_or(Self::ROOT);
        }
        path.reverse();
        path
    }

    /// Every node with self weight, as (root-first frames, weight): the collapsed-stack view.
    pub fn leaves(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.nodes.iter().enumerate().filter(|(_, n)| n.self_weight > 0).map(|(i, n)| (i, n.self_weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Meta, ThreadState};

    #[test]
    fn totals_and_self_weights_add_up() {
        let mut p = Profile::new(Meta::default());
        let t = p.intern_thread(1, 1, None);
        let main = p.intern_frame(Frame::python("main", "a.py", 1));
        let f = p.intern_frame(Frame::python("f", "a.py", 2));
        let g = p.intern_frame(Frame::python("g", "a.py", 3));
        let s_f = p.intern_stack([main, f]);
        let s_fg = p.intern_stack([main, f, g]);
        for (stack, w) in [(s_f, 1), (s_fg, 3), (s_fg, 1)] {
            p.samples.push(Sample { time_us: 0, thread: t, stack, state: ThreadState::new(true, true), weight: w });
        }
        let tree = CallTree::build(&p, |_| true);
        assert_eq!(tree.root().total, 5);
        let leaves: Vec<(Vec<FrameId>, u64)> = tree.leaves().map(|(n, w)| (tree.path(n), w)).collect();
        assert!(leaves.contains(&(vec![main, f], 1)));
        assert!(leaves.contains(&(vec![main, f, g], 4)));
        let main_node = tree.root().children[0];
        assert_eq!(tree.nodes[main_node].total, 5);
        assert_eq!(tree.nodes[main_node].self_weight, 0);
    }
}
